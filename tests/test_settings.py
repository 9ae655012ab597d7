"""The embedded default: with no environment at all, the project needs no server."""

import json
import subprocess
import sys

import pytest
from django.conf import settings

PROBE = """
import json, django
django.setup()
from django.conf import settings
from django.db import connection
with connection.cursor() as c:
    c.execute("PRAGMA journal_mode")
    mode = c.fetchone()[0]
from feedback.agent.llm import describe_backend
print(json.dumps({
    "engine": settings.DATABASES["default"]["ENGINE"], "journal": mode,
    "broker": settings.CELERY_BROKER_URL, "cache": settings.CACHES["default"]["BACKEND"],
    "model": describe_backend(), "debug": settings.DEBUG, "key": len(settings.SECRET_KEY),
}))
"""


def test_the_embedded_default_needs_no_server(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "DJANGO_SETTINGS_MODULE": "agentsite.settings", "VAR_DIR": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen == {
        "engine": "django.db.backends.sqlite3",
        "journal": "wal",
        "broker": "filesystem://",
        "cache": "django.core.cache.backends.filebased.FileBasedCache",
        "model": "Offline demo model (rule-based, no LLM)",
        "debug": False,
        "key": len((tmp_path / "secret_key").read_text()),
    }
    assert seen["key"] >= 50
    assert (tmp_path / "broker" / "queue").is_dir()


@pytest.mark.postgresql
def test_the_suite_itself_runs_on_postgresql_and_a_real_broker():
    # `make test` and CI promise real services; this fails if they were silently swapped.
    assert "postgresql" in settings.DATABASES["default"]["ENGINE"]
    assert not settings.EMBEDDED_BROKER
