"""Celery tasks: they take an id, stay thin and call the code that does the work."""

from celery import shared_task

from feedback.agent.checkpoint import reap_stale_runs
from feedback.agent.loop import execute_run
from feedback.rollups import daily_stats_refresh_recent, daily_stats_refresh_run


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def run_execute_task(run_id: int) -> None:
    # Idempotent: a duplicate or redelivered message finds the run claimed and returns.
    execute_run(run_id)


@shared_task(ignore_result=True)
def runs_reap_stale_task() -> None:
    reap_stale_runs()


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True, soft_time_limit=600)
def run_evaluate_task(run_id: int, expected_round: int | None = None) -> None:
    # Idempotent (evaluate_run writes a round only once), hence safe to redeliver with acks_late.
    from feedback.evaluation.chain import evaluate_run

    # Also recounts the run's day in the metric rollups (feedback.rollups), with the score.
    evaluate_run(run_id, expected_round=expected_round)


@shared_task(ignore_result=True)
def daily_stats_refresh_task(run_id: int) -> None:
    daily_stats_refresh_run(run_id=run_id)


@shared_task(ignore_result=True)
def daily_stats_refresh_recent_task() -> None:
    daily_stats_refresh_recent()
