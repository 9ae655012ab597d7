import os
import socket
import subprocess
import sys
import time
from pathlib import Path

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
def _default_language():
    # A request in another language leaves it active in the thread (LocaleMiddleware activates,
    # nothing deactivates): the next test's messages would be translated.
    from django.utils import translation

    yield
    translation.deactivate()


@pytest.fixture(autouse=True)
def _no_run_in_the_log_context():
    # A run executed in the test's thread (a sub-agent's parent sets its own id back) may leave its
    # id in the log context: the next test's log lines would name it.
    from feedback.logging import current_run, current_step

    yield
    current_run.set(None)
    current_step.set(None)


@pytest.fixture(autouse=True)
def _isolated_folders(settings, tmp_path):
    settings.WORKSPACES_ROOT = tmp_path / "workspaces"
    settings.RUN_SANDBOXES_ROOT = tmp_path / "runs"
    settings.LLM_BACKEND = "offline"
    # Password hashing is deliberately slow; tests create many users and need no security.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def mining_thresholds(settings):
    """The mining thresholds the strategy tests' histories are built around."""
    settings.STRATEGY_MIN_SUPPORT = 5
    settings.STRATEGY_MIN_LIFT = 0.3
    settings.STRATEGY_LOW_SCORE = 0.5


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
def endpoint(settings):
    """A local OpenAI-compatible endpoint (tests/fake_openai.py) as the agent's model, with retries
    fast enough for tests. A test file that needs other settings overrides this fixture."""
    from .fake_openai import FakeOpenAI

    with FakeOpenAI() as server:
        settings.LLM_BACKEND = "openai"
        settings.OPENAI_BASE_URL = server.base_url
        settings.OPENAI_API_KEY = "test-key"
        settings.LLM_MODEL = "test-model"
        settings.LLM_BACKOFF_SECONDS = 0.01
        settings.LLM_MAX_ATTEMPTS = 3
        settings.LLM_TIMEOUT_SECONDS = 5
        yield server


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


MCP_SERVER = Path(__file__).parent / "mcp_server.py"


def mcp_server_processes(parent: int | None = None) -> list[tuple[int, str]]:
    """(pid, state) of the processes running tests/mcp_server.py, and of any zombie, whose parent
    is ``parent`` (this process by default): what an MCP session would leave behind."""
    parent = parent or os.getpid()
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            command = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue  # it ended while we looked
        state, ppid = fields[0], int(fields[1])
        if ppid == parent and (b"mcp_server.py" in command or state == "Z"):
            found.append((int(stat.parent.name), state))
    return found


class McpHttpProcess:
    """tests/mcp_server.py serving streamable HTTP on a free port, as a process of its own."""

    def __init__(self, *flags: str) -> None:
        from .net import free_port

        self.port = free_port()
        self.flags = flags
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.process: subprocess.Popen | None = None

    def start(self) -> "McpHttpProcess":
        command = [sys.executable, str(MCP_SERVER), "http", str(self.port), *self.flags]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                assert self.process.poll() is None, "the MCP test server exited at start"
                time.sleep(0.1)
        raise RuntimeError("the MCP test server did not start listening")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=20)


def register_mcp_server(name: str = "team", *flags: str, url: str = "", **fields):
    """tests/mcp_server.py registered as an operator would (stdio unless a URL is given), listed."""
    from feedback import settings_services
    from feedback.models import McpServer

    if url:
        fields.update(transport=McpServer.Transport.HTTP, url=url)
    else:
        fields.update(command=sys.executable, args=[str(MCP_SERVER), "stdio", *flags])
    server = McpServer.objects.create(name=name, timeout_seconds=30, **fields)
    settings_services.mcp_server_list_tools(server=server)
    server.refresh_from_db()
    return server


@pytest.fixture
def mcp_stdio(db, settings):
    """The test MCP server over stdio, registered as "team" (the worker starts it per run)."""
    settings.TOOL_RETRIEVAL_THRESHOLD = 100  # every tool is offered (retrieval has tests of its own)
    return register_mcp_server("team")


@pytest.fixture
def mcp_http_process():
    process = McpHttpProcess().start()
    yield process
    process.stop()


@pytest.fixture
def mcp_http(db, settings, mcp_http_process):
    """The test MCP server over streamable HTTP, registered as "remote"."""
    settings.TOOL_RETRIEVAL_THRESHOLD = 100
    return register_mcp_server("remote", url=mcp_http_process.url)
