"""Work handed to the worker. Everything that queues a task goes through here, by the task's
name, so the code that queues (services, the agent, the reaper, views) never imports
feedback.tasks, which imports that code to run it.

Work is queued once the current transaction commits: the worker never sees a run before its
row. A broker that is down, or a send that fails in any other way, neither fails the caller nor
undoes its committed change: the reaper sends the run, or its evaluation, again
(agent/checkpoint.py).
"""

import logging
from typing import Any

from django.conf import settings
from django.db import transaction
from kombu.exceptions import OperationalError as BrokerError

from agentsite.celery import app

logger = logging.getLogger(__name__)

RUN_EXECUTE = "feedback.tasks.run_execute_task"
RUN_EVALUATE = "feedback.tasks.run_evaluate_task"
STRATEGIES_MINE = "feedback.tasks.strategies_mine_task"
DEMO_LOOP = "feedback.tasks.demo_loop_task"
ALERT_DELIVER = "feedback.tasks.alert_deliver_task"
RUN_EXPORT = "feedback.tasks.run_export_task"
EVALUATIONS_EXPORT = "feedback.tasks.evaluations_export_task"
EXPERIMENT_ADVANCE = "feedback.tasks.experiment_advance_task"
# Telemetry, not state: what the broker lost of it is not sent again.
_NOT_RESENT = {RUN_EXPORT, EVALUATIONS_EXPORT}


def _after_commit(name: str, *args: Any, countdown: float | None = None, **kwargs: Any) -> None:
    def send() -> None:
        then = "is not sent again" if name in _NOT_RESENT else "will be sent again by the reaper"
        try:
            app.send_task(name, args, kwargs, countdown=countdown)
        except (BrokerError, OSError):
            logger.warning("the broker is unavailable; %s%s %s", name, args, then)
        except Exception:
            # Not a broker that is down but a sender that cannot send (a transport that fails to
            # import, a misconfigured URL): logged with its traceback, and still no error for the
            # caller, whose change is committed (a client told "error" would submit it again).
            logger.exception("sending %s%s failed; it %s", name, args, then)

    transaction.on_commit(send)


def run_execute(run_id: int, *, countdown: float | None = None) -> None:
    """Have a worker run (or resume) the run (``countdown``: not before so many seconds)."""
    _after_commit(RUN_EXECUTE, run_id, countdown=countdown)


def experiment_advance(experiment_id: int) -> None:
    """Have a worker record the experiment's ended pairs and start its next ones."""
    _after_commit(EXPERIMENT_ADVANCE, experiment_id)


def run_evaluate(run_id: int, *, expected_round: int | None = None) -> None:
    """Have a worker evaluate the ended run (``expected_round``: a reviewer's re-evaluation)."""
    if expected_round is None:
        _after_commit(RUN_EVALUATE, run_id)
    else:
        _after_commit(RUN_EVALUATE, run_id, expected_round=expected_round)


def run_export(run_id: int) -> None:
    """Have a worker send the ended run's trace to the OpenTelemetry endpoint, when
    OTEL_EXPORT_RUNS is on (feedback/otel_export/): once, when it has ended and been evaluated."""
    if settings.OTEL_EXPORT_RUNS:
        _after_commit(RUN_EXPORT, run_id)


def evaluations_export(evaluation_ids: list[int]) -> None:
    """Have a worker send evaluations given after their run's export (a reviewer's score, a
    re-evaluation's round) as spans of their own in the run's trace, when OTEL_EXPORT_RUNS is on."""
    if settings.OTEL_EXPORT_RUNS and evaluation_ids:
        _after_commit(EVALUATIONS_EXPORT, list(evaluation_ids))


def strategies_mine() -> None:
    """Mine the recent failures now, as beat's hourly job does."""
    _after_commit(STRATEGIES_MINE)


def demo_loop(*, tasks_per_phase: int, lock_token: str) -> None:
    """Start the demo loop now. Raises when the broker cannot be reached: the caller holds a lock
    for the loop that it must give back then (there is no reaper for demo loops)."""
    app.send_task(DEMO_LOOP, (tasks_per_phase, lock_token))


def alert_deliver(delivery_id: int) -> None:
    """Have a worker make the first attempt of an alert's notification (the task retries the
    others itself). A lost message is sent again by beat's evaluation of the alerts (alerts/delivery.py)."""
    _after_commit(ALERT_DELIVER, delivery_id)
