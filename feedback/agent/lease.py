"""A worker's hold on a run: its lease, the claim that takes a queued run, and the heartbeat that
keeps the lease. The steps themselves are the recorder's.

Only the lease holder writes a run's steps. Every write under the lease is a conditional UPDATE
of the run's row (``WHERE worker = <lease> AND status = running``) in the write's transaction:
the row lock it takes is held until the commit, so the reaper's own conditional UPDATE (which
re-checks that the heartbeat is stale) waits for a write in flight, and a write that starts after
the reaper moved the run finds no row and stops with ``LeaseLost``.
"""

import logging
import os
import socket
import threading
import uuid

from django.conf import settings
from django.db import InterfaceError, OperationalError, close_old_connections, connection
from django.db.models import Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from feedback.models import Run

logger = logging.getLogger(__name__)


class LeaseLost(Exception):
    """Another worker owns this run now; this one must stop without writing."""


def new_lease() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def claim_run(run_id: int, lease: str) -> bool:
    """Take a queued run that nobody asked to cancel for ``lease``: a conditional update from
    "queued", so only one worker gets it however many messages asked for it."""
    now = timezone.now()
    claimed = Run.objects.filter(pk=run_id, status=Run.Status.QUEUED, cancel_requested=False).update(
        # A resumed run keeps the time it first started.
        status=Run.Status.RUNNING,
        worker=lease,
        heartbeat_at=now,
        started_at=Coalesce("started_at", Value(now)),
    )
    return claimed == 1


def load_run(run_id: int) -> Run:
    """The run as its loop needs it: with its task, the task's workspace and its parent run."""
    return Run.objects.select_related("task", "task__workspace", "parent").get(pk=run_id)


class Heartbeat(threading.Thread):
    """Tells the reaper the run's worker is alive, even during a long model call or tool."""

    def __init__(self, run_id: int, lease: str) -> None:
        super().__init__(daemon=True, name=f"heartbeat-{run_id}")
        self.run_id, self.lease = run_id, lease
        self._stop_event = threading.Event()

    def run(self) -> None:
        try:
            while not self._stop_event.wait(settings.RUN_HEARTBEAT_SECONDS):
                close_old_connections()
                try:
                    Run.objects.filter(pk=self.run_id, worker=self.lease).update(heartbeat_at=timezone.now())
                except (OperationalError, InterfaceError):
                    # A dropped connection must not silence the beat: the reaper would take
                    # the run from a live worker. Reconnect at the next beat.
                    logger.warning("heartbeat: the database connection dropped; reconnecting")
                    connection.close()
        finally:
            connection.close()

    def stop(self) -> None:
        self._stop_event.set()
