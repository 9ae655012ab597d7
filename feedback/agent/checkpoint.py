"""Recovery of runs whose worker vanished (killed, machine lost).

A running run's worker beats every RUN_HEARTBEAT_SECONDS. When the beat is older than
RUN_STALE_AFTER_SECONDS the reaper puts the run back in the queue; the next worker resumes it
from its last recorded step (the conversation is rebuilt from the steps). Queued runs whose
message may have been lost are sent again: a duplicate message is harmless, because only a
conditional update from "queued" can claim a run.
"""

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from feedback.models import Run


def reap_stale_runs() -> list[int]:
    from feedback.tasks import queue_after_commit, run_execute_task

    cutoff = timezone.now() - timedelta(seconds=settings.RUN_STALE_AFTER_SECONDS)
    stale_running = Q(status=Run.Status.RUNNING) & (Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True))
    stale_queued = Q(status=Run.Status.QUEUED, created_at__lt=cutoff) & (
        Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True)
    )
    requeued = []
    for run_id in Run.objects.filter(stale_running | stale_queued).values_list("pk", flat=True)[:500]:
        with transaction.atomic():
            # Re-checked in the UPDATE: a worker that beat in the meantime keeps its run.
            moved = Run.objects.filter(Q(pk=run_id) & (stale_running | stale_queued)).update(
                status=Run.Status.QUEUED, worker="", heartbeat_at=timezone.now()
            )
            if moved:
                queue_after_commit(run_execute_task, run_id)
                requeued.append(run_id)
    return requeued
