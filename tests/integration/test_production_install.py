"""A fresh production install starts. requirements.txt alone goes into a new virtualenv of the
Python that scripts/find-python finds (pip may take wheels from its cache; nothing of
requirements-test.txt is installed), and the Procfile's processes are started from it: the web
server, a worker and beat on Redis and PostgreSQL, a worker on RabbitMQ, and a worker of the
embedded default (SQLite, the file-system broker and cache). The test suite's own virtualenv
brings packages that production lacks (``packaging``, which kombu's Redis transport imports,
came only with pytest), so only a virtualenv of its own tells a missing pin.

About two minutes: the install (~40 s, most of it pip), then the processes."""

import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from django.conf import settings

from feedback import roles

from ..api_helpers import token_for
from ..conftest import make_user
from ..net import free_port
from .worker import test_database_url as database_url

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

BASE_DIR = Path(settings.BASE_DIR)
RABBITMQ_URL = "amqp://guest:guest@127.0.0.1:5672//"
# What the worker logs when it has run beat's first task (reap-stale-runs, every 30 s).
REAPED = re.compile(r"Task feedback\.tasks\.runs_reap_stale_task\[[0-9a-f-]+\] succeeded")


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    python = subprocess.run([BASE_DIR / "scripts" / "find-python"], capture_output=True, text=True, check=True)
    path = tmp_path_factory.mktemp("production") / "venv"
    subprocess.run([python.stdout.strip(), "-m", "venv", str(path)], check=True)
    install = subprocess.run(
        [path / "bin" / "python", "-m", "pip", "install", "-q", "-r", BASE_DIR / "requirements.txt"],
        capture_output=True, text=True, env=_outside_env(),
    )  # fmt: skip
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    # The premise: the test suite's packages are not in it.
    assert subprocess.run([path / "bin" / "python", "-c", "import pytest"], capture_output=True).returncode != 0
    return path


def _outside_env() -> dict[str, str]:
    """This process's environment without what points Python at the test suite's virtualenv."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    ours = str(Path(sys.prefix) / "bin")
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != ours)
    return env


def _procfile() -> dict[str, str]:
    lines = (BASE_DIR / "Procfile").read_text().splitlines()
    return dict(line.split(": ", 1) for line in lines if line.strip() and not line.startswith("#"))


class Process:
    """One of the Procfile's processes, run from ``venv`` with ``env``, its output in a file."""

    def __init__(self, name: str, command: str, *, venv: Path, env: dict[str, str], folder: Path) -> None:
        self.name = name
        self.command = command.replace(".venv/bin/", f"{venv}/bin/")
        self.env = env
        self.log_path = folder / f"{name}.log"
        self.process: subprocess.Popen | None = None

    def start(self) -> "Process":
        log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            ["bash", "-c", f"exec {self.command}"], cwd=BASE_DIR, env=self.env, stdout=log, stderr=subprocess.STDOUT
        )
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for(self, pattern: str | re.Pattern, timeout: float = 90) -> re.Match:
        """The first match of ``pattern`` in the output; fails, with the output, if the process
        exits or ``timeout`` passes first."""
        deadline = time.monotonic() + timeout
        while True:
            if found := re.search(pattern, self.log()):
                return found
            assert self.process.poll() is None, f"{self.name} exited ({self.process.returncode}):\n{self.log()[-5000:]}"
            assert time.monotonic() < deadline, f"{self.name}: no {pattern!r} in {timeout} s:\n{self.log()[-5000:]}"
            time.sleep(0.2)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _env(folder: Path, **overrides: str) -> dict[str, str]:
    env = _outside_env()
    env.update(
        DATABASE_URL=database_url(),
        CELERY_BROKER_URL=settings.CELERY_BROKER_URL,
        # A queue of its own: no other test's worker takes these processes' tasks.
        CELERY_TASK_DEFAULT_QUEUE=f"{settings.CELERY_TASK_DEFAULT_QUEUE}-install-{os.getpid()}",
        VAR_DIR=str(folder / "var"),
        WORKSPACES_ROOT=str(folder / "workspaces"),
        RUN_SANDBOXES_ROOT=str(folder / "runs"),
        LLM_BACKEND="offline",
        CONN_MAX_AGE="0",
        STATIC_MANIFEST="false",
    )
    env.update(overrides)
    return {k: v for k, v in env.items() if v}


def _api(base: str, method: str, path: str, token: str, body: dict | None = None, **headers: str) -> tuple:
    request = urllib.request.Request(
        base + "/api/v1" + path,
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json", **headers},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.headers, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read().decode()


def _started(processes: list[Process], name: str, command: str, **kwargs) -> Process:
    process = Process(name, command, **kwargs).start()
    processes.append(process)
    return process


def test_the_web_server_worker_and_beat_of_a_fresh_install_run_a_task_on_redis(venv, tmp_path):
    procfile = _procfile()
    port = free_port()
    env = _env(tmp_path, WEB_PORT=str(port))
    common = {"venv": venv, "env": env, "folder": tmp_path}
    staff = make_user("install-staff", roles.STAFF)
    token = token_for(staff)
    processes: list[Process] = []
    try:
        beat = _started(processes, "beat", procfile["beat"], **common)
        worker = _started(processes, "worker", procfile["worker"] + f" --hostname install-{os.getpid()}@%h", **common)
        web = _started(processes, "web", procfile["web"], **common)
        worker.wait_for(r" ready\.")
        beat.wait_for(r"beat: Starting")
        web.wait_for(r"Booting worker")
        base = f"http://127.0.0.1:{port}"
        body = {"kind": "arithmetic", "text": "What is (17 * 23 + 4) / 5?", "expected_answer": "79"}

        status, headers, text = _api(base, "POST", "/tasks", token, body, **{"Idempotency-Key": "install-1"})
        assert status == 201, text
        assert headers["Content-Type"] == "application/json; charset=utf-8" and headers["Cache-Control"] == "no-store"
        run_id = json.loads(text)["id"]
        # The client's retry of the same request (its answer lost) is the same run.
        status, _headers, again = _api(base, "POST", "/tasks", token, body, **{"Idempotency-Key": "install-1"})
        assert (status, json.loads(again)["id"]) == (201, run_id)

        deadline = time.monotonic() + 90
        while True:
            status, _headers, text = _api(base, "GET", f"/runs/{run_id}", token)
            run = json.loads(text)
            if run["status"] in ("succeeded", "failed") and run["evaluations"]:
                break
            assert time.monotonic() < deadline, f"run {run_id}: {run['status']}\n{worker.log()[-5000:]}"
            time.sleep(0.5)
        assert run["status"] == "succeeded", run["error"]
        assert run["final_output"].endswith("= 79")
        assert run["outcome"] == "accomplished"
        status, _headers, listing = _api(base, "GET", "/runs", token)
        assert [r["id"] for r in json.loads(listing)["data"]] == [run_id]

        beat.wait_for(r"Sending due task reap-stale-runs")
        worker.wait_for(REAPED)
    finally:
        for process in processes:
            process.stop()


@pytest.mark.parametrize("broker", ["rabbitmq", "embedded"])
def test_a_worker_of_a_fresh_install_runs_what_it_is_sent(venv, tmp_path, broker):
    if broker == "rabbitmq":
        env = _env(tmp_path, CELERY_BROKER_URL=RABBITMQ_URL)
    else:  # as `make run` starts it: SQLite, the file-system broker and cache, in a folder of its own
        env = {k: v for k, v in _env(tmp_path).items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL", "CACHE_URL")}
        subprocess.run([venv / "bin" / "python", "manage.py", "migrate", "--noinput", "-v", "0"],
                       cwd=BASE_DIR, env=env, check=True)  # fmt: skip
    worker_line = _procfile()["worker"] + f" --hostname install-{broker}-{os.getpid()}@%h"
    worker = Process("worker", worker_line, venv=venv, env=env, folder=tmp_path).start()
    try:
        worker.wait_for(r" ready\.")
        # Sent by the fresh install too, as the web server and beat send theirs.
        sent = subprocess.run(
            [venv / "bin" / "celery", "-A", "agentsite", "call", "feedback.tasks.runs_reap_stale_task"],
            cwd=BASE_DIR, env=env, capture_output=True, text=True,
        )  # fmt: skip
        assert sent.returncode == 0, sent.stderr
        task_id = sent.stdout.strip()
        worker.wait_for(rf"Task feedback\.tasks\.runs_reap_stale_task\[{re.escape(task_id)}\] succeeded")
    finally:
        worker.stop()
