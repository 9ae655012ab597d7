"""Bench-only Celery tasks, loaded by the benchmark's worker with ``--include bench.tasks``.

``bench_run_task`` is ``run_execute_task`` with the model and tool of the benchmark (a stand-in
with ``BENCH_MODEL_LATENCY_MS`` of simulated latency, and an instant tool), so the product's
own task and model selection stay untouched.
"""

import os

import redis
from celery import shared_task
from django.conf import settings

from bench.loop import NOOP_TOOL, ZeroLatencyModel
from feedback.agent.loop import execute_run

COUNTER = "bench:noop-done"


@shared_task(acks_late=True, ignore_result=True)
def bench_run_task(run_id: int, steps: int) -> None:
    latency = float(os.environ.get("BENCH_MODEL_LATENCY_MS", "0")) / 1000
    execute_run(run_id, model=ZeroLatencyModel(steps, latency), tools={"noop": NOOP_TOOL})


@shared_task(acks_late=True, ignore_result=True)
def bench_noop_task() -> None:
    # The baseline: a task that only tells the benchmark it ran (one Redis INCR).
    redis.Redis.from_url(settings.CELERY_BROKER_URL).incr(COUNTER)
