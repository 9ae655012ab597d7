"""The broker restarted while runs are queued: they run after it returns, none lost, none twice.

A throw-away Redis of the test's own (no persistence, like a cache-configured production Redis)
is killed and started again, so every message it held is really gone. Runs are submitted
before the restart (their messages die with it), during the outage (the submission still
succeeds; publishing fails quietly) and after it. The reaper (checkpoint.reap_stale_runs, a beat
task every 30 s) re-sends the runs still queued; only a conditional update claims a run.
"""

import subprocess
import time

import pytest
from django.conf import settings as django_settings

from agentsite.celery import app
from feedback import services
from feedback.agent.checkpoint import reap_stale_runs
from feedback.models import Run, Step, Task

from ..net import free_port
from .worker import WorkerProcess, wait_for_run

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


class ThrowAwayRedis:
    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None

    def start(self) -> "ThrowAwayRedis":
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--daemonize", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while subprocess.run(["redis-cli", "-p", str(self.port), "ping"], capture_output=True).stdout != b"PONG\n":
            assert time.monotonic() < deadline, "redis did not start"
            time.sleep(0.05)
        return self

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def queued_messages(self, queue: str) -> int:
        out = subprocess.run(["redis-cli", "-p", str(self.port), "llen", queue], capture_output=True, text=True)
        return int(out.stdout.strip() or 0)


@pytest.fixture
def broker(settings):
    """Point this process's Celery app at a Redis of the test's own for the test's duration."""
    redis = ThrowAwayRedis().start()
    old = {k: app.conf[k] for k in ("broker_url", "broker_read_url", "broker_write_url")}
    app.conf.update(broker_url=redis.url, broker_read_url=redis.url, broker_write_url=redis.url)
    settings.CELERY_BROKER_URL = redis.url
    app._pool = None
    app.amqp._producer_pool = None
    yield redis
    redis.kill()
    app.conf.update(old)
    app._pool = None
    app.amqp._producer_pool = None


def _submit(user, n: int, label: str) -> list[Run]:
    return [
        services.task_submit(user=user, kind=Task.Kind.ARITHMETIC, text=f"What is {i} + 1000? ({label})")
        for i in range(n)
    ]


def test_runs_queued_across_a_broker_restart_all_run_exactly_once(broker, shared_folders, staff, settings):
    settings.RUN_STALE_AFTER_SECONDS = 1
    queue = django_settings.CELERY_TASK_DEFAULT_QUEUE
    worker = WorkerProcess(shared_folders, "broker", CELERY_BROKER_URL=broker.url)
    try:
        # 1. Queued while no worker consumes; the broker restarts and their messages are gone.
        before = _submit(staff, 5, "before")
        assert broker.queued_messages(queue) == 5
        broker.kill()
        broker.start()
        assert broker.queued_messages(queue) == 0
        worker.start()

        # 2. Submitted while the broker is down (the worker is connected and loses it): the
        # submission answers, the run is saved as queued.
        broker.kill()
        during = _submit(staff, 5, "during")
        assert all(Run.objects.get(pk=r.pk).status == Run.Status.QUEUED for r in during)
        time.sleep(1)
        broker.start()

        # 3. Submitted after it returned.
        after = _submit(staff, 5, "after")

        # The reaper re-sends what is still queued (also runs whose message is fine: harmless).
        time.sleep(settings.RUN_STALE_AFTER_SECONDS + 0.5)
        resent = reap_stale_runs()
        assert {r.pk for r in before + during} <= set(resent)
        runs = [wait_for_run(r.pk, timeout=90) for r in before + during + after]
    finally:
        worker.stop()

    assert [r.status for r in runs] == [Run.Status.SUCCEEDED] * 15, worker.log()
    reference = [(s.kind, s.tool_name) for s in runs[0].steps.order_by("index")]
    for run in runs:
        steps = list(run.steps.order_by("index"))
        assert [s.index for s in steps] == list(range(run.step_count))
        assert [(s.kind, s.tool_name) for s in steps] == reference  # executed once: no repeated turns
        assert Step.objects.filter(run=run, kind=Step.Kind.FINAL).count() == 1
