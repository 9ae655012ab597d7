"""Benchmark 2: a real Celery worker process (Redis broker, ``--pool threads``).

- throughput: zero-latency runs per second, against no-op tasks per second through the same
  broker and worker (what Celery itself costs per message);
- concurrency: with a simulated model latency, how close one worker process gets to its
  ``--concurrency``: ideal wall time (runs x run duration / concurrency) over the measured one.
"""

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import quote

import redis
from django.conf import settings
from django.db import connection

from bench.results import Result
from feedback.models import Run, Task

BASE_DIR = Path(__file__).resolve().parent.parent


def database_url() -> str:
    s = connection.settings_dict
    auth = quote(s["USER"] or "") + (":" + quote(s["PASSWORD"]) if s.get("PASSWORD") else "")
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


class Worker:
    def __init__(self, folder: Path, *, concurrency: int, latency_ms: int = 0) -> None:
        self.queue = f"bench-{uuid.uuid4().hex[:8]}"
        self.folder, self.concurrency, self.latency_ms = folder, concurrency, latency_ms
        self.log_path = folder / f"worker-{self.queue}.log"

    def __enter__(self) -> "Worker":
        env = {
            **os.environ,
            "DATABASE_URL": database_url(),
            "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
            "CELERY_TASK_DEFAULT_QUEUE": self.queue,
            "RUN_SANDBOXES_ROOT": str(self.folder / "runs"),
            "BENCH_MODEL_LATENCY_MS": str(self.latency_ms),
            "LOG_LEVEL": "WARNING",
        }
        self.process = subprocess.Popen(
            [
                sys.executable, "-m", "celery", "-A", "agentsite", "worker", "--include", "bench.tasks",
                "--pool", "threads", "--concurrency", str(self.concurrency), "--queues", self.queue,
                "--hostname", f"{self.queue}@%h", "--without-gossip", "--without-mingle", "--loglevel", "INFO",
            ],
            cwd=BASE_DIR, env=env, stdout=self.log_path.open("wb"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if b" ready." in self.log_path.read_bytes():
                return self
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        raise RuntimeError(f"the bench worker did not start:\n{self.log_path.read_text()[-3000:]}")

    def __exit__(self, *exc: object) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _make_runs(count: int) -> list[int]:
    task = Task.objects.create(text="Bench: call noop until told to stop.", kind=Task.Kind.GENERAL)
    runs = Run.objects.bulk_create(Run(task=task, task_kind=task.kind) for _ in range(count))
    return [r.pk for r in runs]


def _wait_ended(run_ids: list[int], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not Run.objects.filter(pk__in=run_ids, status__in=Run.ACTIVE_STATUSES).exists():
            failed = Run.objects.filter(pk__in=run_ids).exclude(status=Run.Status.SUCCEEDED).count()
            if failed:
                raise RuntimeError(f"{failed} bench runs did not succeed")
            return
        time.sleep(0.02)
    raise RuntimeError(f"bench runs still active after {timeout} s")


def runs_per_second(worker: Worker, count: int, steps: int, timeout: float = 300) -> float:
    from bench.tasks import bench_run_task

    run_ids = _make_runs(count)
    started = time.perf_counter()
    for run_id in run_ids:
        bench_run_task.apply_async((run_id, steps), queue=worker.queue)
    _wait_ended(run_ids, timeout)
    return count / (time.perf_counter() - started)


def noop_per_second(worker: Worker, count: int, timeout: float = 120) -> float:
    from bench.tasks import COUNTER, bench_noop_task

    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    client.delete(COUNTER)
    started = time.perf_counter()
    for _ in range(count):
        bench_noop_task.apply_async(queue=worker.queue)
    deadline = time.monotonic() + timeout
    while int(client.get(COUNTER) or 0) < count:
        if time.monotonic() > deadline:
            raise RuntimeError("no-op tasks did not finish")
        time.sleep(0.005)
    return count / (time.perf_counter() - started)


def run(
    *,
    folder: Path,
    runs: int = 200,
    steps: int = 10,
    noops: int = 2000,
    concurrency: int = 8,
    latency_ms: int = 500,
    slow_runs: int = 32,
    slow_steps: int = 3,
) -> list[Result]:
    with Worker(folder, concurrency=concurrency) as worker:
        noop_per_second(worker, max(10, noops // 10))  # warm the worker threads and connections
        noop = noop_per_second(worker, noops)
        runs_per_second(worker, concurrency, steps)
        ours = runs_per_second(worker, runs, steps)
    with Worker(folder, concurrency=concurrency, latency_ms=latency_ms) as worker:
        run_seconds = slow_steps * latency_ms / 1000  # model time per run; the rest is overhead
        started = time.perf_counter()
        runs_per_second(worker, slow_runs, slow_steps)
        wall = time.perf_counter() - started
    ideal = slow_runs * run_seconds / concurrency
    return [
        Result("worker", "no-op Celery task per second (baseline)", noop, "/s", noop),
        Result("worker", f"zero-latency {steps}-step runs per second", ours, "/s", noop),
        Result(
            "worker",
            f"concurrency reached, {latency_ms} ms model, --concurrency {concurrency}",
            slow_runs * run_seconds / wall,
            "runs in flight",
            concurrency,
            target=0.8,
            higher_is_better=True,
            note=f"{slow_runs} runs of {slow_steps} model calls: {wall:.1f} s, ideal {ideal:.1f} s",
        ),
    ]
