"""Recovery of runs whose worker vanished (killed, machine lost).

A running run's worker beats every RUN_HEARTBEAT_SECONDS. When the beat is older than
RUN_STALE_AFTER_SECONDS the reaper puts the run back in the queue; the next worker resumes it
from its last recorded step (the conversation is rebuilt from the steps). Queued runs whose
message may have been lost are sent again: a duplicate message is harmless, because only a
conditional update from "queued" can claim a run.

The reaper never ends a run (every end is feedback/lifecycle.py's): a stale run whose cancel was
asked goes back to the queue too, and the worker that finds it there ends it as cancelled.
"""

from datetime import timedelta

from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from feedback import queue
from feedback.models import Evaluation, Run


def reap_stale_runs() -> list[int]:
    cutoff = timezone.now() - timedelta(seconds=settings.RUN_STALE_AFTER_SECONDS)
    stale_running = Q(status=Run.Status.RUNNING) & (Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True))
    stale_queued = Q(status=Run.Status.QUEUED, created_at__lt=cutoff) & (
        Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True)
    )
    requeued = []
    for run_id in Run.objects.filter(stale_running | stale_queued).values_list("pk", flat=True)[:500]:
        with transaction.atomic():
            # Re-checked in the UPDATE: a worker that beat in the meantime keeps its run. A step
            # write in flight holds the row until it commits (with a fresh heartbeat): this waits
            # for it, and a write started after this finds the run no longer its worker's.
            moved = Run.objects.filter(Q(pk=run_id) & (stale_running | stale_queued)).update(
                status=Run.Status.QUEUED, worker="", heartbeat_at=timezone.now()
            )
            if moved:
                queue.run_execute(run_id)
                requeued.append(run_id)
    return requeued


# How far back the reaper looks for ended runs whose evaluation message was lost.
EVALUATION_LOOKBACK = timedelta(days=1)


def resend_lost_evaluations() -> list[int]:
    """Re-send the evaluation of runs that ended a while ago and have no automatic round: the
    message queued when they ended was lost (the broker was down), or their worker died between
    writing the end and queueing it. Every ended run is evaluated, cancelled ones too
    (feedback/lifecycle.py's rule). Safe to repeat, because
    ``evaluate_run`` writes the first round only once; a cache key still limits re-sends to
    one per run per ten stale periods, so a long judge queue is not flooded."""

    now = timezone.now()
    cutoff = now - timedelta(seconds=settings.RUN_STALE_AFTER_SECONDS)
    automatic = Evaluation.objects.filter(run=OuterRef("pk")).exclude(kind=Evaluation.Kind.HUMAN)
    lost = (
        Run.objects.filter(
            status__in=[Run.Status.SUCCEEDED, Run.Status.FAILED, Run.Status.CANCELLED],
            finished_at__lt=cutoff,
            finished_at__gte=now - EVALUATION_LOOKBACK,
        )
        .filter(~Exists(automatic))
        .values_list("pk", flat=True)[:500]
    )
    resent = []
    hold = int(settings.RUN_STALE_AFTER_SECONDS * 10)
    for run_id in lost:
        if cache.add(f"evaluation-resent:{run_id}", 1, timeout=hold):
            queue.run_evaluate(run_id)
            resent.append(run_id)
    return resent
