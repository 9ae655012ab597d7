"""Celery tasks: they take an id, stay thin and call the code that does the work."""

import logging
import random

from celery import shared_task
from django.conf import settings

from feedback.agent.checkpoint import reap_stale_runs, resend_lost_evaluations
from feedback.agent.loop import execute_run
from feedback.alerts import alert_deliver, alerts_evaluate

logger = logging.getLogger(__name__)


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def run_execute_task(run_id: int) -> None:
    # Idempotent: a duplicate or redelivered message finds the run claimed and returns.
    execute_run(run_id)


@shared_task(ignore_result=True)
def runs_reap_stale_task() -> None:
    reap_stale_runs()
    resend_lost_evaluations()


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True, soft_time_limit=600)
def run_evaluate_task(run_id: int, expected_round: int | None = None) -> None:
    # Idempotent (evaluate_run writes a round only once), hence safe to redeliver with acks_late.
    from feedback.evaluation.chain import evaluate_run

    # Its score and outcome, and the export that follows: feedback/lifecycle.py's run_scored.
    evaluate_run(run_id, expected_round=expected_round)


def _export_retried(task, export, what: str) -> None:
    # Imported here: the OpenTelemetry SDK is the exporting worker's business alone.
    from feedback.otel_export import ExportFailed, ExportNotReady

    try:
        export()
    except ExportFailed as exc:
        retries = task.request.retries
        if retries >= settings.OTEL_EXPORT_RETRIES:
            logger.error("%s was not exported after %s attempts: %s", what, retries + 1, exc)
            return  # telemetry: given up on, never anyone else's failure
        log = logger.info if isinstance(exc, ExportNotReady) else logger.warning
        log("%s not exported (attempt %s): %s; trying again", what, retries + 1, exc)
        # Exponential backoff with equal jitter, as for the model's calls.
        backoff = min(600, 5 * 2**retries)
        raise task.retry(countdown=backoff / 2 + random.uniform(0, backoff / 2), max_retries=None) from exc


@shared_task(bind=True, acks_late=True, reject_on_worker_lost=True, ignore_result=True, soft_time_limit=300)
def run_export_task(self, run_id: int) -> None:
    # Idempotent (the same span ids every time): safe to redeliver and to retry.
    from feedback.otel_export import run_trace_export

    _export_retried(self, lambda: run_trace_export(run_id=run_id), f"run {run_id}")


@shared_task(bind=True, acks_late=True, reject_on_worker_lost=True, ignore_result=True, soft_time_limit=300)
def evaluations_export_task(self, evaluation_ids: list[int]) -> None:
    # Idempotent like run_export_task: each evaluation's span has an id of its own, always the same.
    from feedback.otel_export import evaluations_export

    _export_retried(self, lambda: evaluations_export(evaluation_ids=evaluation_ids), f"evaluations {evaluation_ids}")


@shared_task(ignore_result=True, soft_time_limit=900)
def mcp_listings_refresh_task() -> None:
    # Beat's: the MCP servers' stored tool listings kept current, off every run's path.
    from feedback.agent.tools.mcp import mcp_listings_refresh

    mcp_listings_refresh()


@shared_task(ignore_result=True, soft_time_limit=600)
def strategies_mine_task() -> None:
    # Beat's hourly job and the "Analyse now" button: the configured window, read when it runs.
    from feedback.strategies.proposals import mine_and_propose

    mine_and_propose(window_days=settings.STRATEGY_MINING_WINDOW_DAYS)


@shared_task(ignore_result=True)
def strategy_trials_check_task() -> None:
    from feedback.strategies.trials import check_trials

    check_trials()


@shared_task(ignore_result=True, soft_time_limit=900)
def demo_loop_task(tasks_per_phase: int = 60, lock_token: str = "") -> None:
    from django.utils import timezone

    from feedback import locks
    from feedback.strategies import demo_report
    from feedback.strategies.demo import run_demo_loop

    # The click that queued this loop holds the lock; a loop whose lock expired in the queue and
    # was taken by a later click leaves the running to that one.
    held = locks.job_lock_renew(name=locks.DEMO_LOOP, token=lock_token, seconds=locks.DEMO_LOOP_SECONDS)
    if lock_token and not held:
        logger.warning("demo loop: its lock has passed to a later request; not running it twice")
        return
    try:
        started = timezone.now()
        report = run_demo_loop(tasks_per_phase=tasks_per_phase, auto_approve=True, out=lambda line: None)
        demo_report.keep(report, started=started)  # data: the page renders it in the reader's language
    finally:
        locks.job_lock_release(name=locks.DEMO_LOOP, token=lock_token)


@shared_task(ignore_result=True)
def task_scheduled_run_task(task_id: int) -> None:
    # Called by a django-celery-beat entry a person set in the task form.
    from feedback.services import task_run_scheduled

    task_run_scheduled(task_id=task_id)


@shared_task(ignore_result=True, soft_time_limit=900)
def daily_stats_refresh_task() -> None:
    # Beat's job every 15 minutes: the closed days due a rebuild (feedback/metrics/__init__.py says
    # which). Safe to overlap and to repeat; a first rebuild of a long history goes on next time.
    from feedback.metrics.daily import daily_stats_refresh

    daily_stats_refresh(seconds=600)


@shared_task(ignore_result=True, soft_time_limit=900)
def run_sandboxes_clean_task() -> None:
    # Beat's hourly job, no input: sandboxes past RUN_SANDBOX_RETENTION_DAYS removed, workspaces not
    # measured yet measured. Safe to repeat and to overlap (feedback/retention.py).
    from feedback.quota import workspaces_measure
    from feedback.retention import sandboxes_clean

    sandboxes_clean()
    workspaces_measure()


@shared_task(ignore_result=True, soft_time_limit=300)
def alerts_evaluate_task() -> None:
    # Beat's every-minute job. Two at once (a second beat, a redelivery) open and resolve each
    # incident once all the same: see feedback/alerts/.
    alerts_evaluate()


@shared_task(ignore_result=True, soft_time_limit=120)
def alert_deliver_task(delivery_id: int) -> None:
    # One attempt; a failure that may pass queues the next one itself (after its backoff).
    alert_deliver(delivery_id=delivery_id)


@shared_task(ignore_result=True)
def idempotency_keys_purge_task() -> None:
    # Beat's hourly job: API idempotency keys past API_IDEMPOTENCY_KEY_HOURS (feedback/api/idempotency.py).
    from feedback.api.idempotency import purge_expired

    purge_expired()
