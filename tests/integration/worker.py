"""A real Celery worker process for tests: same broker, same test database, own queue."""

import os
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

from django.conf import settings
from django.db import connection

from feedback.models import Run

READY_TIMEOUT = 60


def test_database_url() -> str:
    s = connection.settings_dict
    auth = quote(s["USER"] or "")
    if s.get("PASSWORD"):
        auth += ":" + quote(s["PASSWORD"])
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


class WorkerProcess:
    def __init__(self, folders: Path, name: str = "w1", *, concurrency: int = 4, **extra_env: str) -> None:
        self.folders = folders
        self.name = name
        self.concurrency = concurrency
        self.extra_env = extra_env
        self.log_path = folders / f"worker-{name}.log"
        self.process: subprocess.Popen | None = None

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "DATABASE_URL": test_database_url(),
            "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
            "CELERY_TASK_DEFAULT_QUEUE": settings.CELERY_TASK_DEFAULT_QUEUE,
            "WORKSPACES_ROOT": str(self.folders / "workspaces"),
            "RUN_SANDBOXES_ROOT": str(self.folders / "runs"),
            "LLM_BACKEND": "offline",
            "CONN_MAX_AGE": "0",
            **self.extra_env,
        }

    def start(self) -> "WorkerProcess":
        log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [
                sys.executable, "-m", "celery", "-A", "agentsite", "worker",
                "--pool", "threads", "--concurrency", str(self.concurrency),
                "--queues", settings.CELERY_TASK_DEFAULT_QUEUE,
                "--hostname", f"{self.name}-{os.getpid()}@%h",
                "--without-gossip", "--without-mingle", "--loglevel", "INFO",
            ],
            cwd=settings.BASE_DIR, env=self.env(), stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if b" ready." in self.log_path.read_bytes():
                return self
            if self.process.poll() is not None:
                break
            time.sleep(0.2)
        raise RuntimeError(f"The Celery worker did not start:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:]

    def kill(self) -> None:
        """SIGKILL: no shutdown, no acknowledgement, no goodbye (a machine lost)."""
        assert self.process is not None
        self.process.kill()
        self.process.wait()

    def stop(self) -> None:
        """Warm shutdown (safe to call on a worker that was never started or is dead)."""
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def wait_for_run(run_id: int, timeout: float = 60) -> Run:
    """Poll the database until the run has ended (the worker writes, this process reads)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = Run.objects.get(pk=run_id)
        if not run.is_active:
            return run
        time.sleep(0.2)
    raise AssertionError(f"Run {run_id} still {run.status} after {timeout} s")
