import os

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from feedback import roles


def pytest_sessionstart(session: pytest.Session) -> None:
    from django.conf import settings

    if os.environ.get("TEST_EMBEDDED"):
        # `make test`'s second run is the embedded default's: refuse to run it on anything else.
        if not (settings.EMBEDDED_DATABASE and settings.EMBEDDED_BROKER):
            pytest.exit("TEST_EMBEDDED: the run must be on SQLite and the file-system broker.", returncode=1)
    elif os.environ.get("TEST_REQUIRE_SERVICES") or os.environ.get("CI"):
        # `make test` (and CI) promise PostgreSQL and a real broker: refuse to run on less.
        engine = settings.DATABASES["default"]["ENGINE"]
        if "postgresql" not in engine:
            pytest.exit(f"The suite must run on PostgreSQL, not {engine}: set DATABASE_URL.", returncode=1)
        if settings.EMBEDDED_BROKER:
            pytest.exit("The suite must run on a real broker: set CELERY_BROKER_URL.", returncode=1)


@pytest.fixture(autouse=True)
def _fresh_cache():
    # Breakers and tool results live in the shared cache: no test may see another's.
    from django.core.cache import cache

    cache.clear()


@pytest.fixture(autouse=True)
def _isolated_folders(settings, tmp_path):
    settings.WORKSPACES_ROOT = tmp_path / "workspaces"
    settings.RUN_SANDBOXES_ROOT = tmp_path / "runs"
    settings.LLM_BACKEND = "offline"
    # Password hashing is deliberately slow; tests create many users and need no security.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def make_user(username: str, *groups: str, **extra):
    roles.ensure_groups()
    user = get_user_model().objects.create_user(username=username, password="pw-" + username, **extra)
    user.groups.set(Group.objects.filter(name__in=groups))
    return user


@pytest.fixture
def staff(db):
    return make_user("staff", roles.STAFF)


@pytest.fixture
def operator(db):
    return make_user("operator", roles.OPERATOR)


@pytest.fixture
def reviewer(db):
    return make_user("reviewer", roles.REVIEWER)


@pytest.fixture
def nobody(db):
    return make_user("nobody")


@pytest.fixture
def demo_workspace(db):
    from feedback.demo import seed_workspace

    return seed_workspace()


@pytest.fixture
def judge_server(settings):
    """A local OpenAI-compatible endpoint, configured as the judge's endpoint."""
    from .judge_server import JudgeServer

    server = JudgeServer().start()
    settings.LLM_BACKEND = "auto"
    settings.OPENAI_BASE_URL = server.base_url
    settings.OPENAI_API_KEY = "test-key"
    settings.LLM_JUDGE_MODEL = "judge-test"
    settings.LLM_TIMEOUT_SECONDS = 1.0
    yield server
    server.stop()


@pytest.fixture
def make_reviewer(db):
    return lambda username: make_user(username, roles.REVIEWER)


@pytest.fixture
def sent_tasks(monkeypatch):
    """What was handed to the broker, as (task name, args, kwargs), with no broker involved."""
    from agentsite.celery import app

    sent = []

    def send_task(name, args=(), kwargs=None, **options):
        sent.append((name, tuple(args or ()), kwargs or {}))

    monkeypatch.setattr(app, "send_task", send_task)
    return sent
