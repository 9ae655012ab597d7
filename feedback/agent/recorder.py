"""Writes a run's steps as they happen, under the worker's lease.

Each step, its attempts and the run's step counter are written in one transaction, with the run
row locked, so a step is never half-written and indices stay contiguous. A worker that lost its
lease (the reaper gave the run to another worker) can no longer write: LeaseLost stops it.

On PostgreSQL that transaction is one call of a function, sent in one round trip; the counter it
returns, with the run's cancel flag, is what the loop checks at the next turn.
"""

import json
import logging
import math
import os
import re
import socket
import threading
import time
import uuid
from contextlib import nullcontext
from typing import Any

from django.conf import settings
from django.db import InterfaceError, OperationalError, close_old_connections, connection, models, transaction
from django.utils import timezone

from feedback.logging import current_step
from feedback.models import Run, Step, StepAttempt
from feedback.privacy import mask_text

from .errors import error_signature
from .invoker import Attempt, Outcome
from .llm import LLMAttempt, ToolCall

logger = logging.getLogger(__name__)

_MASKED_STEP_FIELDS = ("thought", "arguments", "result", "error")
_MASKED_RUN_FIELDS = ("system_prompt", "final_output", "error", "plan")


# A step write is retried this many times on a fresh connection when the connection drops.
DB_WRITE_ATTEMPTS = 4
DB_RETRY_SECONDS = 0.5


def drop_broken_connection() -> None:
    """Forget this thread's connection if the server dropped it, so the next query reconnects.

    Django checks connections (CONN_HEALTH_CHECKS) only between requests and tasks; a run is one
    long task, so the loop checks at each turn. Never inside a transaction (a test's, say)."""
    if connection.connection is not None and not connection.in_atomic_block and not connection.is_usable():
        logger.warning("the database connection was dropped; reconnecting")
        connection.close()


# Lone UTF-16 surrogates ("\ud800" in a JSON string decodes to one) cannot be encoded as UTF-8.
_SURROGATES = re.compile("[\ud800-\udfff]")


def storable(value: Any) -> Any:
    """``value`` as PostgreSQL can store it and privacy allows: masked, without the NUL
    characters text and jsonb columns refuse, without lone surrogates UTF-8 cannot encode,
    without NaN or infinite numbers jsonb refuses.
    Model output and tool results are hostile input: none of this may crash a run."""
    if isinstance(value, str):
        value = mask_text(value).replace("\x00", "\ufffd")
        return value if value.isascii() else _SURROGATES.sub("\ufffd", value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {storable(str(k)): storable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [storable(v) for v in value]
    return value


class LeaseLost(Exception):
    """Another worker owns this run now; this one must stop without writing."""


def new_lease() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


# On PostgreSQL the whole write is one call of a function (migration 0007 says why): the run's
# counter claimed under the lease, then the step and its attempts inserted from JSON, in one
# statement and one round trip where BEGIN, the UPDATE, two INSERTs and COMMIT took five.
_WRITE_STEP = (
    "SELECT * FROM feedback_write_step(%s::bigint, %s::text, %s::text, %s::timestamptz, %s::integer, %s::integer,"
    " %s::jsonb, %s::jsonb)"
)
# Elsewhere (SQLite), the same claim as a statement of its own: the UPDATE locks the run row
# until the step is committed (so indices stay contiguous) and returns the counter and cancel flag.
_NEXT_INDEX = (
    f"UPDATE {Run._meta.db_table} SET step_count = step_count + 1, heartbeat_at = %s,"
    " tokens_in = tokens_in + %s, tokens_out = tokens_out + %s"
    " WHERE id = %s AND worker = %s AND status = %s RETURNING step_count, cancel_requested"
)
_STEP_FIELDS = [f for f in Step._meta.concrete_fields if f.name not in ("id", "run", "index")]
_ATTEMPT_FIELDS = [f for f in StepAttempt._meta.concrete_fields if f.name not in ("id", "step")]


def _record(values: dict[str, Any], fields: list[models.Field]) -> dict[str, Any]:
    """Field values as jsonb_populate_record reads a row: by column, timestamps in ISO 8601 (with
    their offset), JSON fields as they are (anything else JSON cannot hold fails, as in the ORM)."""
    record = {}
    for f in fields:
        value = values[f.attname]
        if value is not None and isinstance(f, models.DateTimeField):
            value = value.isoformat()
        record[f.column] = value
    return record


def _attempt_fields(attempt: Attempt | LLMAttempt) -> dict[str, Any]:
    return {
        "number": attempt.number,
        "started_at": attempt.started_at,
        "duration_ms": attempt.duration_ms,
        "error": storable(attempt.error),
        "error_class": getattr(attempt, "error_class", "") or ("LLMError" if attempt.error else ""),
        "retryable": attempt.retryable,
    }


class Recorder:
    def __init__(self, run: Run, lease: str) -> None:
        self.run = run
        self.lease = lease
        # The steps of the run, when the loop has loaded them: every step written here is
        # appended, so the conversation is rebuilt without reading them back each turn.
        self.steps: list[Step] | None = None
        # The run's counter and cancel flag as last read or returned by a step write; None
        # until then. Only this lease writes the run's steps, so the counter stays exact.
        self.step_count: int | None = None
        self.cancel_requested = False
        self._written_since_progress = False

    def progress(self) -> tuple[int, bool]:
        """The run's step count and whether a person asked to cancel it: as the last step
        write returned them when a step was written since the last call (every turn that goes
        on writes one), else read now. So each turn sees a cancel requested up to its last
        write, and a turn costs no query of its own."""
        if not self._written_since_progress:
            try:
                self._read_progress()
            except (OperationalError, InterfaceError):
                # The connection dropped while the run was idle: reconnect once here (step
                # writes retry on their own).
                if connection.in_atomic_block:
                    raise
                connection.close()
                self._read_progress()
        self._written_since_progress = False
        return self.step_count, self.cancel_requested

    def _read_progress(self) -> None:
        self.step_count, self.cancel_requested = Run.objects.values_list("step_count", "cancel_requested").get(
            pk=self.run.pk
        )

    def step(self, tries: list[Attempt] | list[LLMAttempt] = (), **fields: Any) -> Step:
        """Write the next step; ``tries`` are its attempt rows (tool or model call).

        A dropped database connection (server restart, network cut, terminated backend) rolls the
        transaction back whole, so the write is retried on a fresh connection. If the commit went
        through but its acknowledgement was lost, the retry finds the step already there."""
        fields.setdefault("attempts", max(1, len(tries)))
        # Personal data and secrets never reach the database (the tool already had the real values).
        fields.update({k: storable(fields[k]) for k in _MASKED_STEP_FIELDS if k in fields})
        step = Step(run=self.run, **fields)
        for attempt in range(1, DB_WRITE_ATTEMPTS + 1):
            try:
                if self.step_count is None:
                    self._read_progress()
                # Only this lease writes the run's steps: the counter is the index this step
                # gets, and a step already there means a failed attempt committed after all.
                if attempt > 1 and (existing := self.run.steps.filter(index=self.step_count).first()):
                    step = existing
                    self._read_progress()
                else:
                    self._write_step(step, tries)
                break
            except (OperationalError, InterfaceError):
                if connection.in_atomic_block or attempt == DB_WRITE_ATTEMPTS:
                    raise
                logger.warning("the database connection dropped while writing a step; retrying", exc_info=True)
                connection.close()
                time.sleep(DB_RETRY_SECONDS * attempt)
        self._written_since_progress = True
        current_step.set(step.index)
        if self.steps is not None:
            self.steps.append(step)
        return step

    def _write_step(self, step: Step, tries: list) -> None:
        """Insert ``step`` (unsaved) at the run's next index, with its attempt rows."""
        if connection.vendor != "postgresql":
            return self._write_step_in_a_transaction(step, tries)
        attempts = [_record(_attempt_fields(a), _ATTEMPT_FIELDS) for a in tries]
        params = [
            self.run.pk,
            self.lease,
            Run.Status.RUNNING,
            timezone.now(),
            step.tokens_in,
            step.tokens_out,
            # JSON text, cast to jsonb in the call: psycopg's Jsonb adapter took three times as
            # long to quote the same documents.
            json.dumps(_record(vars(step), _STEP_FIELDS)),
            json.dumps(attempts),
        ]
        # Inside a caller's transaction (a test's), a savepoint keeps a failed write from
        # aborting it, as before; alone, the statement is its own transaction.
        savepoint = transaction.atomic() if connection.in_atomic_block else nullcontext()
        with savepoint, connection.cursor() as cursor:
            cursor.execute(_WRITE_STEP, params)
            row = cursor.fetchone()
        if row is None:
            raise LeaseLost(f"run {self.run.pk} is no longer leased to {self.lease}")
        step.pk, step.index, self.cancel_requested = row
        step._state.adding, step._state.db = False, connection.alias
        self.step_count = step.index + 1

    def _write_step_in_a_transaction(self, step: Step, tries: list) -> None:
        # SQLite (the embedded default) has no such function: the same writes, one by one.
        claim = [timezone.now(), step.tokens_in, step.tokens_out, self.run.pk, self.lease, Run.Status.RUNNING]
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute(_NEXT_INDEX, claim)
                owner = cursor.fetchone()
            if owner is None:
                raise LeaseLost(f"run {self.run.pk} is no longer leased to {self.lease}")
            # pk None: a retry after a rolled-back attempt inserts afresh.
            step.pk, step.index = None, owner[0] - 1
            step.save(force_insert=True)
            if tries:
                StepAttempt.objects.bulk_create(StepAttempt(step=step, **_attempt_fields(a)) for a in tries)
        self.step_count, self.cancel_requested = owner[0], bool(owner[1])

    def tool_call(self, turn: int, call: ToolCall, outcome: Outcome, note: str = "") -> Step:
        finished = outcome.finished_at or timezone.now()
        return self.step(
            tries=outcome.attempts,
            turn=turn,
            kind=Step.Kind.TOOL_CALL,
            thought=note,
            tool_name=call.name[:100],
            tool_call_id=call.id[:100],
            arguments=outcome.arguments,
            result=outcome.result if outcome.ok else None,
            error=outcome.error,
            error_class=outcome.error_class,
            error_signature="" if outcome.ok else error_signature(call.name, outcome.error_class, outcome.error),
            success=outcome.ok,
            cached=outcome.cached,
            stale=outcome.stale,
            served_by=outcome.served_by,
            validation=outcome.validation,
            validation_status=(outcome.validation or {}).get("status", ""),
            started_at=outcome.started_at,
            finished_at=finished,
            duration_ms=max(0, int((finished - outcome.started_at).total_seconds() * 1000)),
        )

    def update_run(self, **fields: Any) -> None:
        fields = {k: storable(v) if k in _MASKED_RUN_FIELDS else v for k, v in fields.items()}
        if not Run.objects.filter(pk=self.run.pk, worker=self.lease).update(**fields):
            raise LeaseLost(f"run {self.run.pk} is no longer leased to {self.lease}")
        for name, value in fields.items():
            if not hasattr(value, "resolve_expression"):
                setattr(self.run, name, value)


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
