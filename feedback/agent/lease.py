"""A worker's hold on a run: its lease, the claim that takes a queued run, the run loaded as its
loop needs it, the heartbeat that keeps the lease (and writes the run's counters), and the lock
whatever takes a run from its worker holds first. The steps themselves are the recorder's.
"""

import functools
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import InterfaceError, OperationalError, close_old_connections, connection
from django.db.models import F, Value
from django.db.models.functions import Greatest
from django.utils import timezone

from feedback.models import Run, Task, Workspace

logger = logging.getLogger(__name__)


class LeaseLost(Exception):
    """Another worker owns this run now; this one must stop without writing."""


def new_lease() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def claim_run(run_id: int, lease: str) -> bool:
    """Take a queued run that nobody asked to cancel for ``lease``: a conditional update from
    "queued", so only one worker gets it however many messages asked for it."""
    now = Run._meta.get_field("heartbeat_at").get_db_prep_save(timezone.now(), connection)
    with connection.cursor() as cursor:
        cursor.execute(_claim_sql(), [Run.Status.RUNNING, lease, now, now, run_id, Run.Status.QUEUED, False])
        return cursor.rowcount == 1


@functools.cache
def _claim_sql() -> str:
    # Built once, as the run's other statements under a lease (recorder._run_update, _run_loader).
    quote = connection.ops.quote_name
    return (
        f"UPDATE {quote(Run._meta.db_table)} SET {quote('status')} = %s, {quote('worker')} = %s,"
        f" {quote('heartbeat_at')} = %s, {quote('started_at')} = COALESCE({quote('started_at')}, %s)"
        f" WHERE {quote('id')} = %s AND {quote('status')} = %s AND {quote('cancel_requested')} = %s"
    )


# The run as its loop needs it: with its task, the task's workspace and its parent run.
_LOADED = ((Run, "r"), (Task, "t"), (Workspace, "w"), (Run, "p"))


@functools.cache
def _run_loader() -> tuple[str, list[tuple[int, list, Any]]]:
    """The SELECT of ``load_run`` and each column's converters, as the ORM would apply them;
    built once per process: compiling the same query with select_related took the ORM longer than
    four steps of a zero-latency run."""
    quote = connection.ops.quote_name
    columns, converters = [], []
    for model, alias in _LOADED:
        for field in model._meta.concrete_fields:
            col = field.get_col(alias)
            found = connection.ops.get_db_converters(col) + field.get_db_converters(connection)
            if found:
                converters.append((len(columns), found, col))
            columns.append(f"{alias}.{quote(field.column)}")
    table = {alias: quote(model._meta.db_table) for model, alias in _LOADED}
    sql = (
        f"SELECT {', '.join(columns)} FROM {table['r']} r"
        f" INNER JOIN {table['t']} t ON t.{quote('id')} = r.{quote('task_id')}"
        f" LEFT OUTER JOIN {table['w']} w ON w.{quote('id')} = t.{quote('workspace_id')}"
        f" LEFT OUTER JOIN {table['p']} p ON p.{quote('id')} = r.{quote('parent_id')}"
        f" WHERE r.{quote('id')} = %s"
    )
    return sql, converters


def load_run(run_id: int) -> Run:
    """``Run.objects.select_related("task", "task__workspace", "parent").get(pk=run_id)``, from
    SQL built once (see ``_run_loader``)."""
    sql, converters = _run_loader()
    with connection.cursor() as cursor:
        cursor.execute(sql, [run_id])
        row = cursor.fetchone()
    if row is None:
        raise Run.DoesNotExist(f"run {run_id} does not exist")
    row = list(row)
    for position, found, col in converters:
        for converter in found:
            row[position] = converter(row[position], col, connection)
    loaded, start = [], 0
    for model, _alias in _LOADED:
        fields = model._meta.concrete_fields
        values = row[start : start + len(fields)]
        start += len(fields)
        # A LEFT JOIN that found nothing reads as a row of NULLs, primary key included.
        loaded.append(model.from_db(connection.alias, [f.attname for f in fields], values) if values[0] else None)
    run, task, workspace, parent = loaded
    task.workspace = workspace
    run.task, run.parent = task, parent
    return run


def hold_run_from_step_writes(run_id: int) -> None:
    """Wait for a step write in flight on ``run_id`` and keep new ones out until the caller's
    transaction ends: whatever takes a run from its worker calls this first (see migration 0010).
    SQLite has a single writer: a write in flight has already committed or not started."""
    assert connection.in_atomic_block, "the lock is held until the transaction ends"
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [run_id])


# How often at most a running run's counters are written to its row (its step count and tokens,
# as the run list and the run's page show them).
COUNTERS_EVERY_SECONDS = 1.0


class Heartbeat(threading.Thread):
    """Tells the reaper the run's worker is alive, even during a long model call or tool, and
    writes the run's counters (``counters``: a callable, set once the loop exists) when they
    changed, at most once a second."""

    def __init__(self, run_id: int, lease: str) -> None:
        super().__init__(daemon=True, name=f"heartbeat-{run_id}")
        self.run_id, self.lease = run_id, lease
        self.counters: Callable[[], dict[str, int]] | None = None
        self._stop_event = threading.Event()

    def run(self) -> None:
        every = min(COUNTERS_EVERY_SECONDS, settings.RUN_HEARTBEAT_SECONDS)
        beaten, written = time.monotonic(), {}
        try:
            while not self._stop_event.wait(every):
                counters = self.counters() if self.counters is not None else {}
                if counters == written and time.monotonic() - beaten < settings.RUN_HEARTBEAT_SECONDS:
                    continue
                close_old_connections()
                try:
                    self._beat(counters)
                    beaten, written = time.monotonic(), counters
                except (OperationalError, InterfaceError):
                    # A dropped connection must not silence the beat: the reaper would take
                    # the run from a live worker. Reconnect at the next beat.
                    logger.warning("heartbeat: the database connection dropped; reconnecting")
                    connection.close()
        finally:
            connection.close()

    def _beat(self, counters: dict[str, int]) -> None:
        # Greatest: the loop's own last write (the run's end) may land first; counts only grow.
        fields = {name: Greatest(F(name), Value(value)) for name, value in counters.items()}
        Run.objects.filter(pk=self.run_id, worker=self.lease).update(heartbeat_at=timezone.now(), **fields)

    def stop(self) -> None:
        self._stop_event.set()
