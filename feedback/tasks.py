"""Celery tasks: they take an id, stay thin and call the code that does the work."""

import logging
from collections.abc import Callable

from celery import shared_task
from django.conf import settings
from django.core.management import call_command

from feedback.agent.checkpoint import reap_stale_runs, resend_lost_evaluations
from feedback.agent.loop import execute_run
from feedback.alerts import alert_deliver, alerts_evaluate
from feedback.alerts.delivery import RETRY_BACKOFF_MAX_SECONDS, DeliveryFailed
from feedback.models import AlertAttempt
from feedback.retrying import SettingsRetries, TransientError

logger = logging.getLogger(__name__)


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def run_execute_task(run_id: int) -> None:
    from feedback import queue
    from feedback.experiments.services import yields_to_production

    if yields_to_production(run_id):
        # An experiment's run waits while people's runs wait for a worker (lower priority).
        queue.run_execute(run_id, countdown=settings.EXPERIMENT_YIELD_SECONDS)
        return
    # Idempotent: a duplicate or redelivered message finds the run claimed and returns.
    execute_run(run_id)


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def experiment_advance_task(experiment_id: int) -> None:
    # Idempotent: serialised on the experiment's row, and a second call finds nothing new to do.
    from feedback.experiments.services import experiment_advance

    experiment_advance(experiment_id=experiment_id)


@shared_task(ignore_result=True)
def runs_reap_stale_task() -> None:
    from feedback.experiments.services import experiments_resume

    reap_stale_runs()
    resend_lost_evaluations()
    experiments_resume()


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True, soft_time_limit=600)
def run_evaluate_task(run_id: int, expected_round: int | None = None) -> None:
    # Idempotent (evaluate_run writes a round only once), hence safe to redeliver with acks_late.
    from feedback.evaluation.chain import evaluate_run

    # Its score and outcome, and the export that follows: feedback/lifecycle.py's run_scored.
    evaluate_run(run_id, expected_round=expected_round)


class _ExportTask(SettingsRetries):
    """The OTel exports: ExportFailed (a TransientError) retried by Celery (exponential backoff from 5 s to 10
    minutes, full jitter), OTEL_EXPORT_RETRIES times; then given up on quietly (telemetry is never
    anyone else's failure: the task ends well, with an error logged)."""

    max_retries_setting = "OTEL_EXPORT_RETRIES"

    def export(self, export: Callable[[], None], what: str) -> None:
        # Imported here: the OpenTelemetry SDK is the exporting worker's business alone.
        from feedback.otel_export import ExportNotReady

        try:
            export()
        except TransientError as exc:
            tried = self.request.retries + 1
            if self.request.retries >= self.max_retries:
                logger.error("%s was not exported after %s attempts: %s", what, tried, exc)
                return
            log = logger.info if isinstance(exc, ExportNotReady) else logger.warning
            log("%s not exported (attempt %s): %s; trying again", what, tried, exc)
            raise  # autoretry_for: Celery queues the next attempt after its backoff


_EXPORT_RETRIES = {
    "base": _ExportTask,
    "bind": True,
    "autoretry_for": (TransientError,),
    "retry_backoff": 5,
    "retry_backoff_max": 600,
    "retry_jitter": True,
    "acks_late": True,
    "reject_on_worker_lost": True,
    "ignore_result": True,
    "soft_time_limit": 300,
}


@shared_task(**_EXPORT_RETRIES)
def run_export_task(self, run_id: int) -> None:
    # Idempotent (the same span ids every time): safe to redeliver and to retry.
    from feedback.otel_export import run_trace_export

    self.export(lambda: run_trace_export(run_id=run_id), f"run {run_id}")


@shared_task(**_EXPORT_RETRIES)
def evaluations_export_task(self, evaluation_ids: list[int]) -> None:
    # Idempotent like run_export_task: each evaluation's span has an id of its own, always the same.
    from feedback.otel_export import evaluations_export

    self.export(lambda: evaluations_export(evaluation_ids=evaluation_ids), f"evaluations {evaluation_ids}")


@shared_task(ignore_result=True, soft_time_limit=900)
def mcp_listings_refresh_task() -> None:
    # Beat's: the MCP servers' stored tool listings kept current, off every run's path.
    from feedback.agent.tools.mcp import mcp_listings_refresh

    mcp_listings_refresh()


@shared_task(ignore_result=True, soft_time_limit=600)
def strategies_mine_task() -> None:
    # Beat's hourly job and the "Analyse now" button: the configured window, read when it runs.
    # The patterns' proposals, then the insight lists' updates from failure/success pairs.
    from feedback.strategies.insights import insights_update
    from feedback.strategies.proposals import mine_and_propose

    mine_and_propose(window_days=settings.STRATEGY_MINING_WINDOW_DAYS)
    insights_update(window_days=settings.STRATEGY_MINING_WINDOW_DAYS)


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


class _AlertDeliverTask(SettingsRetries):
    # The attempts after the first: ALERT_DELIVERY_MAX_ATTEMPTS in all (the delivery's row counts
    # them too, and gives up at the same number, across a lost message's resend as well).
    max_retries_setting = "ALERT_DELIVERY_MAX_ATTEMPTS"
    max_retries_offset = -1


@shared_task(
    base=_AlertDeliverTask,
    bind=True,
    ignore_result=True,
    soft_time_limit=120,
    autoretry_for=(DeliveryFailed,),
    retry_backoff=settings.ALERT_RETRY_BACKOFF_SECONDS,
    retry_backoff_max=RETRY_BACKOFF_MAX_SECONDS,
    retry_jitter=True,
)
def alert_deliver_task(self, delivery_id: int) -> None:
    # One attempt, recorded on the delivery's row; one that failed for a reason that may pass is
    # retried by Celery after its backoff (autoretry_for).
    attempt = alert_deliver(delivery_id=delivery_id)
    if attempt is not None and attempt.outcome == AlertAttempt.Outcome.RETRY:
        raise DeliveryFailed(f"alert delivery {delivery_id} attempt {attempt.number}: {attempt.error}")


@shared_task(ignore_result=True)
def sessions_purge_task() -> None:
    # Beat's hourly job: Django deletes a database session only at its logout; one that expired
    # (SESSION_COOKIE_AGE) stays, a row per sign-in, unless `clearsessions` runs.
    call_command("clearsessions")


@shared_task(ignore_result=True)
def idempotency_keys_purge_task() -> None:
    # Beat's hourly job: API idempotency keys past API_IDEMPOTENCY_KEY_HOURS (feedback/api/idempotency.py).
    from feedback.api.idempotency import purge_expired

    purge_expired()
