"""Typed settings (agentsite/environment.py): every variable settings.py reads has a type and what it
accepts; a value outside it is never taken for something else, and it stops `manage.py check`, the
web server and the worker with a message naming the variable, its value and what it accepts."""

import ast
import runpy
import subprocess
import sys

import pytest
from django.conf import settings
from ninja.throttling import SimpleRateThrottle

from agentsite.environment import Environment, parse_rate

from .settings_helpers import clean_environment, manage_py_check

SETTINGS_FILE = settings.BASE_DIR / "agentsite" / "settings.py"
# Every file that reads the environment for the settings: settings.py and those it reads in
# (agent_settings.py).
SETTINGS_SOURCES = sorted((settings.BASE_DIR / "agentsite").glob("*settings.py"))

# (variable, a bad value): every mode, and a bad value of each other kind.
BAD_VALUES = [
    ("LLM_BACKEND", "opneai"),
    ("LLM_JUDGE_BACKEND", "openai"),
    ("LLM_TOOL_MODE", "jsno"),
    ("LLM_GRAMMAR_SAFE_SCHEMAS", "yes"),
    ("STRATEGY_PROPOSAL_WRITER", "templates"),
    ("LOG_LEVEL", "verbose"),
    ("LOG_FORMAT", "jsonl"),
    ("DEBUG", "ture"),
    ("PRIVACY_MASKING", "maybe"),
    ("AGENT_MAX_STEPS", "ten"),
    ("AGENT_MAX_STEPS", "0"),
    ("LLM_TIMEOUT_SECONDS", "60s"),
    ("LLM_TEMPERATURE", "hot"),
    ("STRATEGY_LOW_SCORE", "1.5"),
    ("STRATEGY_TRIAL_FRACTION", "nan"),
    ("API_RATE_LIMIT", "lots"),
    ("API_RATE_LIMIT", "0/min"),
    ("API_AUTH_FAILURE_LIMIT", "300/minute"),
    ("API_IDEMPOTENCY_KEY_HOURS", "0"),
    ("DISK_QUOTA_MB", "-1"),
    ("TIME_ZONE", "Mars/Olympus"),
    ("DATABASE_URL", "postgress://db/feedback"),
    ("CACHE_URL", "reddis://cache:6379/1"),
    ("CELERY_BROKER_URL", "reddis://broker:6379/0"),
    ("EMAIL_URL", "smtp-tls://mail:587"),
    ("SITE_URL", "feedback.example.org"),
    ("OPENAI_BASE_URL", "localhost:8080/v1"),
    ("SECURE_PROXY_SSL_HEADER", "HTTP_X_FORWARDED_PROTO"),
]
MODES = {"LLM_BACKEND", "LLM_JUDGE_BACKEND", "LLM_TOOL_MODE", "LLM_GRAMMAR_SAFE_SCHEMAS", "STRATEGY_PROPOSAL_WRITER",
         "LOG_LEVEL", "LOG_FORMAT"}  # fmt: skip


def _settings_with(monkeypatch, tmp_path, **variables: str) -> dict:
    """settings.py run again with ``variables`` in the environment: its settings, as a dict."""
    monkeypatch.setenv("VAR_DIR", str(tmp_path))
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    return runpy.run_path(str(SETTINGS_FILE))


def _defaults(monkeypatch, tmp_path) -> dict:
    for name in {name for name, _value in BAD_VALUES}:
        monkeypatch.delenv(name, raising=False)
    return _settings_with(monkeypatch, tmp_path)


@pytest.mark.parametrize(("variable", "value"), BAD_VALUES, ids=[f"{n}={v}" for n, v in BAD_VALUES])
def test_a_bad_value_is_a_problem_naming_it_and_never_taken_for_another(monkeypatch, tmp_path, variable, value):
    defaults = _defaults(monkeypatch, tmp_path)
    assert defaults["ENVIRONMENT_PROBLEMS"] == []
    read = _settings_with(monkeypatch, tmp_path, **{variable: value})
    (problem,) = read["ENVIRONMENT_PROBLEMS"]
    assert problem.startswith(f"{variable}={value!r} is not valid: {variable} is ")
    assert len(problem) > len(f"{variable}={value!r} is not valid: {variable} is ") + 5  # says what it takes
    # What the setting became is what it is when unset: the value is not read as something else.
    changed = {k for k, v in read.items() if k.isupper() and k != "ENVIRONMENT_PROBLEMS" and defaults.get(k) != v}
    assert changed == set()


def test_every_mode_is_in_the_table():
    assert {name for name, _value in BAD_VALUES} >= MODES
    assert set(_modes_in_settings()) == MODES


def _env_calls() -> list[ast.Call]:
    trees = [ast.parse(source.read_text()) for source in SETTINGS_SOURCES]
    return [
        node
        for tree in trees
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and ast.unparse(node.func.value) == "env"
    ]


def _modes_in_settings() -> list[str]:
    calls = [c for c in _env_calls() if c.func.attr == "str" and any(k.arg == "choices" for k in c.keywords)]
    return [c.args[0].value for c in calls]


# The variables whose value is any text: names, keys, paths, hosts, addresses.
FREE_TEXT = {"VAR_DIR", "SECRET_KEY", "LOGIN_CLIENT_IP_HEADER", "STATIC_ROOT", "EMAIL_BACKEND", "EMAIL_FILE_PATH",
             "DEFAULT_FROM_EMAIL", "CELERY_TASK_DEFAULT_QUEUE", "OPENAI_API_KEY", "LLM_MODEL", "LLM_JUDGE_MODEL",
             "LLM_EMBEDDING_MODEL", "OTEL_SERVICE_NAME", "WORKSPACES_ROOT", "RUN_SANDBOXES_ROOT"}  # fmt: skip


def test_every_variable_is_read_typed():
    source = "".join(path.read_text() for path in SETTINGS_SOURCES)
    assert "os.environ" not in source and "getenv" not in source and "environ.Env" not in source
    calls = _env_calls()
    assert len(calls) > 80
    readers = {name for name in vars(Environment) if not name.startswith("_")}
    assert {c.func.attr for c in calls} <= readers
    # Text without choices is free text by decision, not by default: a new mode gets its choices.
    text = {c.args[0].value for c in calls if c.func.attr == "str" and not any(k.arg == "choices" for k in c.keywords)}
    assert text == FREE_TEXT


@pytest.mark.parametrize(
    ("variable", "value", "read"),
    [("LLM_TOOL_MODE", "json", "json"), ("LLM_TOOL_MODE", "", "auto"), ("DEBUG", "yes", True), ("DEBUG", "0", False),
     ("DEBUG", "", False), ("API_RATE_LIMIT", "20/15min", "20/15min"), ("API_RATE_LIMIT", "0", "0"),
     ("LLM_TEMPERATURE", "0", 0.0), ("AGENT_MAX_STEPS", " 12 ", 12), ("TIME_ZONE", "Europe/Paris", "Europe/Paris"),
     ("CELERY_BROKER_URL", "redis+socket:///run/redis.sock", "redis+socket:///run/redis.sock"),
     ("CELERY_BROKER_URL", "amqp://one//;amqp://two//", "amqp://one//;amqp://two//"),
     ("OPENAI_BASE_URL", "", "")],
)  # fmt: skip
def test_a_good_value_is_read_as_its_type(monkeypatch, tmp_path, variable, value, read):
    got = _settings_with(monkeypatch, tmp_path, **{variable: value})
    assert got["ENVIRONMENT_PROBLEMS"] == [] and got[variable] == read


def test_a_bad_urls_password_is_not_shown():
    env = Environment({"DATABASE_URL": "postgress://app:s3cret@db/feedback", "CACHE_URL": "redis2://:pw@cache/1"})
    env.db("DATABASE_URL", default="sqlite:///db.sqlite3")
    env.cache("CACHE_URL", default="locmemcache://")
    assert env.problems[0].startswith("DATABASE_URL='postgress://app:***@db/feedback' is not valid: ")
    assert env.problems[1].startswith("CACHE_URL='redis2://:***@cache/1' is not valid: ")


def test_rules_between_settings_are_problems_too():
    env = Environment({"RUN_HEARTBEAT_SECONDS": "90"})
    heartbeat = env.float("RUN_HEARTBEAT_SECONDS", default=5.0, gt=0)
    env.require(heartbeat < 60, "RUN_STALE_AFTER_SECONDS must be more than RUN_HEARTBEAT_SECONDS.")
    assert env.problems == ["RUN_STALE_AFTER_SECONDS must be more than RUN_HEARTBEAT_SECONDS."]


@pytest.mark.parametrize("rate", ["300/min", "20/15min", "5/s", "2/sec", "1000/hour", "10000/day", "3/2h", "7/90"])
def test_a_rate_is_read_as_ninjas_throttles_read_it(rate):
    assert parse_rate(rate) == SimpleRateThrottle("1/s").parse_rate(rate)


@pytest.mark.parametrize("rate", ["0/min", "5/0", "5/0min", "-1/min", "300/minute", "300/MIN", "lots", "5/"])
def test_a_rate_ninja_would_misread_or_refuse_is_refused(rate):
    with pytest.raises(ValueError):
        parse_rate(rate)


def test_bad_values_stop_manage_py_check_each_named(tmp_path):
    refused = manage_py_check(tmp_path, **{name: value for name, value in BAD_VALUES if name in MODES})
    assert refused.returncode != 0
    for name, value in BAD_VALUES:
        if name in MODES:
            assert f"(feedback.E001) {name}={value!r} is not valid: {name} is one of " in refused.stderr
    assert manage_py_check(tmp_path).returncode == 0


@pytest.mark.parametrize(
    "command",
    [[sys.executable, "-c", "import agentsite.wsgi"], [sys.executable, "-m", "celery", "-A", "agentsite", "worker"]],
    ids=["web server", "worker"],
)
def test_the_web_server_and_the_worker_do_not_start_on_a_bad_value(tmp_path, command):
    environment = clean_environment(tmp_path, LLM_TOOL_MODE="jsno", DEBUG="ture")
    started = subprocess.run(
        command, cwd=settings.BASE_DIR, env=environment, capture_output=True, text=True, timeout=120
    )
    assert started.returncode != 0
    assert "LLM_TOOL_MODE='jsno' is not valid: LLM_TOOL_MODE is one of auto, native, json." in started.stderr
    assert "DEBUG='ture' is not valid" in started.stderr
