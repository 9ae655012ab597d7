"""How long run sandboxes are kept: RUN_SANDBOX_RETENTION_DAYS after their run ended (0: forever).

A run's sandbox (``RUN_SANDBOXES_ROOT/<root run id>``, feedback/agent/loop.py) is its own copy of
its task's workspace, shared with its sub-agents. Nothing reads it once the whole tree of runs has
ended: a re-run starts from the task's workspace, not from the old sandbox; the trace, the
evaluations and the export are in the database; a confirmation reads it only while it is pending,
which is while its run waits (active). So beat's hourly clean-up (``sandboxes_clean``) removes the
sandboxes of root runs that ended more than the retention ago and whose sub-agent runs all did too,
and never one of a run that is queued, running or waiting for a confirmation (an ended run is never
resumed). It marks the run (``sandbox_deleted_at``), which its page shows.

It looks at the sandboxes in this machine's folder, so it also removes those from before sizes were
recorded; where workers do not share RUN_SANDBOXES_ROOT, each machine runs ``manage.py
clean_run_sandboxes`` (the same function) from its own cron. Removing, then marking, is safe to
repeat and to run twice at once: a sandbox already gone is simply marked.
"""

import logging
import os
import shutil
from datetime import datetime, timedelta
from itertools import batched
from pathlib import Path

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from feedback.models import Run

logger = logging.getLogger(__name__)

TASK = "feedback.tasks.run_sandboxes_clean_task"
BATCH = 500


def retention_days() -> int:
    return settings.RUN_SANDBOX_RETENTION_DAYS


def removal_due(finished_at: datetime | None) -> datetime | None:
    """When the sandbox of a run that ended at ``finished_at`` may go; None: never (no retention,
    or the run has not ended)."""
    days = retention_days()
    return finished_at + timedelta(days=days) if days and finished_at else None


def sandbox_state(run: Run) -> dict | None:
    """What the run's page says of its sandbox: ``bytes`` (None: not recorded), ``due`` (when it
    may go), or ``removed_at`` and ``days_kept``. None for a run that has none of its own (a
    sub-agent's is its root run's) or has not started."""
    if run.parent_id is not None or (run.started_at is None and run.sandbox_deleted_at is None):
        return None
    if run.sandbox_deleted_at is not None:
        ended = run.finished_at or run.created_at
        return {"removed_at": run.sandbox_deleted_at, "days_kept": (run.sandbox_deleted_at - ended).days}
    return {"bytes": run.sandbox_bytes, "due": None if run.is_active else removal_due(run.finished_at)}


def _ended_before(cutoff: datetime) -> Q:
    # A run that ended without an end time (older rows) counts from its creation.
    return ~Q(status__in=Run.ACTIVE_STATUSES) & (
        Q(finished_at__lt=cutoff) | Q(finished_at__isnull=True, created_at__lt=cutoff)
    )


def _expired(run_ids: list[int], cutoff: datetime) -> list[int]:
    """Those of ``run_ids`` whose sandbox may go: root runs that ended before ``cutoff``, with every
    sub-agent run under them (they work in its sandbox) ended before it too."""
    roots = set(Run.objects.filter(_ended_before(cutoff), pk__in=run_ids, parent=None).values_list("pk", flat=True))
    below = {pk: pk for pk in roots}  # a run of the tree -> its root
    while below:
        children = Run.objects.filter(parent__in=list(below)).values_list("pk", "parent", "status", "finished_at")
        nested = {}
        for pk, parent, status, finished_at in children:
            root = below[parent]
            if status in Run.ACTIVE_STATUSES or finished_at is None or finished_at >= cutoff:
                roots.discard(root)
            nested[pk] = root
        below = {pk: root for pk, root in nested.items() if root in roots}
    return sorted(roots)


def _gone_already(function, path, exc: BaseException) -> None:
    # Another clean-up got there first: what is gone is what we wanted.
    if not isinstance(exc, FileNotFoundError):
        raise exc


def sandboxes_clean(*, now: datetime | None = None) -> list[int]:
    """Remove the expired sandboxes of this machine's RUN_SANDBOXES_ROOT and mark their runs;
    returns the ids of the runs whose sandbox was removed. Also frees the reservation of runs that
    ended without starting (they never had a sandbox)."""
    now = now or timezone.now()
    Run.objects.filter(started_at__isnull=True, sandbox_bytes__isnull=False, sandbox_deleted_at__isnull=True).exclude(
        status__in=Run.ACTIVE_STATUSES
    ).update(sandbox_bytes=None)
    days = retention_days()
    root = Path(settings.RUN_SANDBOXES_ROOT)
    if not days or not root.is_dir():
        return []
    cutoff = now - timedelta(days=days)
    # Only folders named as runs are; a link is never followed (nor removed).
    with os.scandir(root) as entries:
        ids = sorted(int(e.name) for e in entries if e.name.isdecimal() and e.is_dir(follow_symlinks=False))
    removed = []
    for chunk in batched(ids, BATCH):
        for run_id in _expired(list(chunk), cutoff):
            try:
                shutil.rmtree(root / str(run_id), onexc=_gone_already)
            except OSError:
                logger.exception("could not remove the sandbox of run %s; trying again at the next clean-up", run_id)
                continue
            Run.objects.filter(pk=run_id, sandbox_deleted_at__isnull=True).update(sandbox_deleted_at=now)
            removed.append(run_id)
    if removed:
        logger.info("removed the sandboxes of %s run(s) that ended over %s days ago", len(removed), days)
    return removed


def next_cleanup() -> datetime | None:
    """When beat runs the clean-up next, from its entry (None: beat has not run it yet, or it is off)."""
    from django_celery_beat.models import PeriodicTask

    entry = PeriodicTask.objects.filter(task=TASK, enabled=True).select_related("interval", "crontab").first()
    if entry is None or entry.last_run_at is None:
        return None
    now = timezone.now()
    return max(now, now + entry.schedule.remaining_estimate(entry.last_run_at))
