"""Settings, all from the environment.

With nothing set, the project runs embedded: SQLite in WAL mode, a file-system Celery broker
that needs no server, a file cache and the offline demo model, all under ``var/``. Production
changes only environment variables (``DATABASE_URL=postgres://...``,
``CELERY_BROKER_URL=redis://...``, ``CACHE_URL=redis://...``, ``OPENAI_BASE_URL``...).
Each variable is read typed, with what it accepts (agentsite/environment.py: ``choices=`` for a mode,
``ge=``/``le=`` for a number); a value it does not accept stops ``manage.py check`` and the servers.
"""

import secrets
from pathlib import Path

from django.utils.csp import CSP
from kombu.transport import TRANSPORT_ALIASES

from agentsite.agent_settings import agent_settings
from agentsite.environment import Environment

BASE_DIR = Path(__file__).resolve().parent.parent

env = Environment()
# What env found wrong, filled as the settings below are read (reported by feedback/checks.py).
ENVIRONMENT_PROBLEMS = env.problems
VAR_DIR = Path(env.str("VAR_DIR", default=str(BASE_DIR / "var")))
VAR_DIR.mkdir(parents=True, exist_ok=True)


def _embedded_secret_key() -> str:
    # A key generated once per checkout keeps sessions valid across restarts without asking
    # the user to configure anything.
    path = VAR_DIR / "secret_key"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


SECRET_KEY = env.str("SECRET_KEY", default="") or _embedded_secret_key()
DEBUG = env.bool("DEBUG", default=False)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django_htmx",
    "django_celery_beat",
    # django-ninja: the JSON API (feedback/api/); listed so its docs page uses its own static files.
    "ninja",
    "feedback",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # Django's, sending an htmx request whose session ended to the login page as a whole page
    # (it reads request.htmx, which HtmxMiddleware sets before any view hook runs). Before CSRF,
    # which reads the body: a signed-out person's upload is refused unread.
    "feedback.middleware.LoginRequiredMiddleware",
    # A body larger than the address takes, or of unknown length, refused unread (413, 411).
    "feedback.middleware.RequestBodyLimitMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # After the user, the language and the messages are known: the 405 page shows them.
    "feedback.middleware.MethodNotAllowedPageMiddleware",
]

# Uploads are kept in memory up to the view's limits, never written to disk (feedback/uploads.py).
FILE_UPLOAD_HANDLERS = ["feedback.uploads.BoundedMemoryUploadHandler"]

ROOT_URLCONF = "agentsite.urls"
WSGI_APPLICATION = "agentsite.wsgi.application"
ASGI_APPLICATION = "agentsite.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "feedback.context_processors.roles",
            ],
        },
    },
]

# --- Database -----------------------------------------------------------------------------
DATABASES = {
    "default": env.db("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'db.sqlite3'}"),
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL lets the web server read while the worker writes; IMMEDIATE transactions and a busy
    # timeout turn write contention into short waits instead of "database is locked" errors.
    DATABASES["default"]["OPTIONS"] = {
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
    }
    # Tests on the embedded default use a file, as `make run` does: threads and worker processes
    # then share it (an in-memory database is one connection's).
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test.sqlite3")}
else:
    DATABASES["default"].setdefault("CONN_MAX_AGE", env.int("CONN_MAX_AGE", default=60, ge=0))
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
EMBEDDED_DATABASE = DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3"

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Cache (shared by every process: the circuit breakers and tool result cache live here) -----
CACHES = {"default": env.cache("CACHE_URL", default=f"filecache://{VAR_DIR / 'cache'}")}

# --- Auth ------------------------------------------------------------------------------------
# First the login throttle (it refuses a locked login before any password is checked), then
# Django's own backend.
AUTHENTICATION_BACKENDS = ["feedback.throttle.LockoutBackend", "feedback.roles.RoleBackend"]
# Failed logins (feedback/throttle.py): this many for one account name, or from one IP address
# (an IPv6 client by its /64), refuse every login of that account, or from that address, for
# LOGIN_LOCKOUT_SECONDS after the last one, the right password included. 0: no limit.
LOGIN_FAILURES_PER_ACCOUNT = env.int("LOGIN_FAILURES_PER_ACCOUNT", default=5, ge=0)
LOGIN_FAILURES_PER_IP = env.int("LOGIN_FAILURES_PER_IP", default=20, ge=0)
LOGIN_LOCKOUT_SECONDS = env.int("LOGIN_LOCKOUT_SECONDS", default=15 * 60, ge=1)
# Behind a reverse proxy every request comes from the proxy's address: name the header in which
# it passes the client's (e.g. X-Forwarded-For, whose right-most address is used, or X-Real-IP).
# Never set by default: without such a proxy any client could claim any address in it.
LOGIN_CLIENT_IP_HEADER = env.str("LOGIN_CLIENT_IP_HEADER", default="")
# Password-reset mails (feedback/throttle.py): this many for one email address, or asked from one
# client address, within PASSWORD_RESET_MAIL_SECONDS of one another; past it the page answers the
# same and sends nothing until that long after the last. 0: no limit.
PASSWORD_RESET_MAILS_PER_EMAIL = env.int("PASSWORD_RESET_MAILS_PER_EMAIL", default=3, ge=0)
PASSWORD_RESET_MAILS_PER_IP = env.int("PASSWORD_RESET_MAILS_PER_IP", default=10, ge=0)
PASSWORD_RESET_MAIL_SECONDS = env.int("PASSWORD_RESET_MAIL_SECONDS", default=60 * 60, ge=1)
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {
        "NAME": "django.contrib.auth.password_validation.MinimumLengthValidator",
        "OPTIONS": {"min_length": env.int("PASSWORD_MIN_LENGTH", default=12, ge=1)},
    },
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# The JSON API (feedback/api/): requests per token, and failed authentications per client address
# (the address as the login throttle sees it: LOGIN_CLIENT_IP_HEADER), each "N/period"
# (s, min, hour, day; "20/15min"), as django-ninja's throttles read it (feedback/api/throttles.py);
# "0": no limit. Past either, 429 with Retry-After.
API_RATE_LIMIT = env.rate("API_RATE_LIMIT", default="300/min")
API_AUTH_FAILURE_LIMIT = env.rate("API_AUTH_FAILURE_LIMIT", default="20/15min")
# How long an Idempotency-Key is kept: a retry within it gets the first answer (feedback/api/idempotency.py).
API_IDEMPOTENCY_KEY_HOURS = env.int("API_IDEMPOTENCY_KEY_HOURS", default=24, ge=1)
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "feedback-home"
LOGOUT_REDIRECT_URL = "login"

# --- I18n ------------------------------------------------------------------------------------
LANGUAGE_CODE = "en"
LANGUAGES = [("en", "English"), ("zh-hans", "简体中文")]
LOCALE_PATHS = [BASE_DIR / "locale"]
TIME_ZONE = env.time_zone("TIME_ZONE", default="UTC")
USE_I18N = True
USE_TZ = True

# --- Static files (vendored, served by WhiteNoise: no CDN, works offline) ---------------------
STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(env.str("STATIC_ROOT", default=str(VAR_DIR / "staticfiles")))
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
# Hashed, compressed file names need `collectstatic`; tests and DEBUG serve files as they are.
STATIC_MANIFEST = env.bool("STATIC_MANIFEST", default=not DEBUG)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"
        if STATIC_MANIFEST
        else "django.contrib.staticfiles.storage.StaticFilesStorage"
    },
}

# --- Security (production values come with DEBUG=false and HTTPS settings) -----------------
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=False)
SESSION_COOKIE_SECURE = env.bool("SESSION_COOKIE_SECURE", default=False)
CSRF_COOKIE_SECURE = env.bool("CSRF_COOKIE_SECURE", default=False)
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=0, ge=0)
# Only for a domain whose every subdomain is HTTPS; both are needed for `check --deploy`.
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=False)
SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=False)
# Behind a TLS-terminating proxy, e.g. "HTTP_X_FORWARDED_PROTO,https". Never set by default:
# trusting the header without such a proxy would let a client claim HTTPS.
_proxy_header = env.list("SECURE_PROXY_SSL_HEADER", default=[], length=2)
if len(_proxy_header) == 2:
    SECURE_PROXY_SSL_HEADER = tuple(_proxy_header)
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
# A working day; people log in again after that (the default is two weeks).
SESSION_COOKIE_AGE = env.int("SESSION_COOKIE_AGE", default=12 * 3600, ge=1)
# htmx sends the token from the page's hx-headers, never from the cookie: scripts need not read it.
CSRF_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
# Content-Security-Policy: scripts, styles and everything else from this site's own files only. No
# inline script or style anywhere (no nonces either: a nonce must differ per response, and pages
# are served from the page cache); htmx is told not to add its own <style> nor to eval
# (templates/base.html), and the waterfall's numbers are data attributes that trace.js applies.
SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF],
    "style-src": [CSP.SELF],
    "img-src": [CSP.SELF],
    "object-src": [CSP.NONE],
    "base-uri": [CSP.NONE],
    "form-action": [CSP.SELF],
    "frame-ancestors": [CSP.NONE],
}

# --- Email (password resets) -----------------------------------------------------------------
# EMAIL_URL as django-environ reads it: smtp+tls://user:password@host:587, smtp://host:25,
# consolemail:// ... By default there is no mail server: each message is written as a file into
# var/mail/ (EMAIL_FILE_PATH), where the embedded default's reset links can be read.
# EMAIL_BACKEND, when set, names the backend class itself.
_email = env.email("EMAIL_URL")
_email.pop("EMAIL_FILE_PATH", None)  # the folder is EMAIL_FILE_PATH's alone
vars().update(_email)
EMAIL_BACKEND = env.str(
    "EMAIL_BACKEND", default=_email.get("EMAIL_BACKEND", "django.core.mail.backends.filebased.EmailBackend")
)
EMAIL_FILE_PATH = env.str("EMAIL_FILE_PATH", default=str(VAR_DIR / "mail"))
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="webmaster@localhost")

# --- Alerts (feedback/alerts/) -------------------------------------------------------------------
# The dashboard's address as people reach it: the links in alert notifications start with it.
# By default the port the web server listens on: WEB_PORT (what `make run` gives honcho, which sets
# a PORT of its own in every process, the worker's too) or else PORT (gunicorn's, a PaaS's).
_WEB_PORT = env.int("WEB_PORT", default=env.int("PORT", default=8000, ge=1, le=65535), ge=1, le=65535)
SITE_URL = env.url("SITE_URL", default=f"http://localhost:{_WEB_PORT}", schemes=("http", "https")).rstrip("/")
# How long a webhook receiver, or the mail server, has to answer one attempt.
ALERT_DELIVERY_TIMEOUT_SECONDS = env.float("ALERT_DELIVERY_TIMEOUT_SECONDS", default=10.0, gt=0)
# Attempts per notification (a webhook's 5xx, timeouts, unreachable receivers and mail servers
# are retried), the first retry's wait, doubling after each.
ALERT_DELIVERY_MAX_ATTEMPTS = env.int("ALERT_DELIVERY_MAX_ATTEMPTS", default=5, ge=1)
ALERT_RETRY_BACKOFF_SECONDS = env.float("ALERT_RETRY_BACKOFF_SECONDS", default=10.0, ge=0)

# --- Celery ----------------------------------------------------------------------------------
_broker_dir = VAR_DIR / "broker"
# Kombu's transports, by the names their URLs start with (redis, rediss, amqp, filesystem...).
BROKER_SCHEMES = frozenset(name.lower() for name in TRANSPORT_ALIASES)
CELERY_BROKER_URL = env.url("CELERY_BROKER_URL", default="filesystem://", schemes=BROKER_SCHEMES)
EMBEDDED_BROKER = CELERY_BROKER_URL.startswith("filesystem://")
if EMBEDDED_BROKER:
    for sub in ("queue", "control", "processed"):
        (_broker_dir / sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "queue"),
        "data_folder_out": str(_broker_dir / "queue"),
        "control_folder": str(_broker_dir / "control"),
        "processed_folder": str(_broker_dir / "processed"),
        "store_processed": False,
        "polling_interval": 0.2,
    }
else:
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TIMEZONE = TIME_ZONE
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_TASK_DEFAULT_QUEUE = env.str("CELERY_TASK_DEFAULT_QUEUE", default="celery")
# Fixed schedules (django-celery-beat copies them into the database, where staff can edit them).
CELERY_BEAT_SCHEDULE = {
    "reap-stale-runs": {"task": "feedback.tasks.runs_reap_stale_task", "schedule": 30.0},
    "mine-failures": {"task": "feedback.tasks.strategies_mine_task", "schedule": 3600.0},
    "check-trials": {"task": "feedback.tasks.strategy_trials_check_task", "schedule": 300.0},
    # The metrics' closed days rebuilt from the rows when due (feedback/metrics/__init__.py).
    "refresh-daily-stats": {"task": "feedback.tasks.daily_stats_refresh_task", "schedule": 900.0},
    # Every enabled alert rule, its incidents opened and resolved (feedback/alerts/incidents.py).
    "evaluate-alerts": {"task": "feedback.tasks.alerts_evaluate_task", "schedule": 60.0},
    # Run sandboxes past RUN_SANDBOX_RETENTION_DAYS removed, workspaces not measured yet measured
    # (feedback/retention.py).
    "clean-run-sandboxes": {"task": "feedback.tasks.run_sandboxes_clean_task", "schedule": 3600.0},
    "purge-idempotency-keys": {"task": "feedback.tasks.idempotency_keys_purge_task", "schedule": 3600.0},
    # Sessions past SESSION_COOKIE_AGE, which Django removes only at a logout (manage.py clearsessions).
    "purge-expired-sessions": {"task": "feedback.tasks.sessions_purge_task", "schedule": 3600.0},
    # MCP servers' tool listings, never listed or older than MCP_TOOLS_REFRESH_SECONDS (runs never list).
    "refresh-mcp-listings": {"task": "feedback.tasks.mcp_listings_refresh_task", "schedule": 60.0},
}

# --- The agent -------------------------------------------------------------------------------
# Read in agentsite/agent_settings.py, with this reader: the model endpoint, the loop's limits, its
# tools, the runs' heartbeat, paired experiments, and the folders runs work in.
vars().update(agent_settings(env, var_dir=VAR_DIR))

# Mask personal data and secrets (emails, phones, cards, API keys) before anything is stored.
PRIVACY_MASKING = env.bool("PRIVACY_MASKING", default=True)

# --- OpenTelemetry export of runs (feedback/otel_export/) -----------------------------------------
# Off by default. On, every run is sent once evaluated, as GenAI spans, to the OTLP/HTTP endpoint
# the standard variables name, which the exporter reads itself: OTEL_EXPORTER_OTLP_ENDPOINT (or
# _TRACES_ENDPOINT), _HEADERS, _TIMEOUT, _COMPRESSION, _CERTIFICATE. OTEL_SDK_DISABLED turns it off.
_otel_sdk_disabled = env.bool("OTEL_SDK_DISABLED", default=False)
OTEL_EXPORT_RUNS = env.bool("OTEL_EXPORT_RUNS", default=False) and not _otel_sdk_disabled
OTEL_SERVICE_NAME = env.str("OTEL_SERVICE_NAME", default="agent-feedback")
# Prompts, answers, tool arguments and results, evaluator feedback: the stored (masked) values.
OTEL_CAPTURE_CONTENT = env.bool(
    "OTEL_CAPTURE_CONTENT", default=env.bool("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", default=False)
)
# An export the receiver refused (down, 4xx/5xx, timeout) is tried again this many times.
OTEL_EXPORT_RETRIES = env.int("OTEL_EXPORT_RETRIES", default=5, ge=0)

# --- Strategies (layer 3) ----------------------------------------------------------------------
STRATEGY_MINING_WINDOW_DAYS = env.int("STRATEGY_MINING_WINDOW_DAYS", default=30, ge=1)
STRATEGY_MIN_SUPPORT = env.int("STRATEGY_MIN_SUPPORT", default=5, ge=1)
# Who writes a proposal's title and guidance: the configured model ("model", the template where
# there is no endpoint or it fails) or always the template ("template": a small local model
# parrots the instructions it is given instead of generalising the evidence).
STRATEGY_PROPOSAL_WRITER = env.str("STRATEGY_PROPOSAL_WRITER", default="model", choices=("model", "template"))
# A run is "failing" for mining when it was not accomplished, failed, or, its outcome unknown (no
# evidence decided it), scored below this; "succeeding" when it answered and was accomplished.
STRATEGY_LOW_SCORE = env.float("STRATEGY_LOW_SCORE", default=0.7, ge=0, le=1)
# A pattern must be this much more frequent among failures than among successes.
STRATEGY_MIN_LIFT = env.float("STRATEGY_MIN_LIFT", default=0.3, ge=0, le=1)
STRATEGY_TRIAL_FRACTION = env.float("STRATEGY_TRIAL_FRACTION", default=0.5, ge=0.05, le=0.95)
STRATEGY_TRIAL_MIN_SAMPLES = env.int("STRATEGY_TRIAL_MIN_SAMPLES", default=10, ge=1)
# The smallest score difference worth having: the trial page's expected runs are for it, and a
# trial whose always-valid interval fits within ±it shows "no effect".
STRATEGY_TRIAL_MIN_EFFECT = env.float("STRATEGY_TRIAL_MIN_EFFECT", default=0.1, gt=0, le=1)
# Opt-in autonomy: proposals this well supported go to trial without a reviewer (never to active).
STRATEGY_AUTONOMY = env.bool("STRATEGY_AUTONOMY", default=False)
STRATEGY_AUTONOMY_MIN_SUPPORT = env.int("STRATEGY_AUTONOMY_MIN_SUPPORT", default=20, ge=1)
STRATEGY_AUTONOMY_MIN_CONFIDENCE = env.float("STRATEGY_AUTONOMY_MIN_CONFIDENCE", default=0.9, ge=0, le=1)

# --- Logging ---------------------------------------------------------------------------------
LOG_LEVEL = env.str("LOG_LEVEL", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"))
# "json" for one JSON object per line (log shippers); every line of a run carries its ids.
LOG_FORMAT = env.str("LOG_FORMAT", default="plain", choices=("plain", "json"))
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {
        "run_context": {"()": "feedback.logging.RunContextFilter"},
        # A refused request (4xx) is one line, without Django's traceback; a 500 keeps its own.
        "refusals": {"()": "feedback.logging.RefusalFilter"},
    },
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s [run=%(run_id)s step=%(step)s] %(message)s"},
        "json": {"()": "feedback.logging.JsonFormatter"},
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT, "filters": ["refusals", "run_context"]}
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {"django.db.backends": {"level": "INFO"}},
}
