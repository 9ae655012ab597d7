"""Writes a run's steps as they happen, under the worker's lease.

Each step and its attempts are written in one transaction, at the index the worker counted:
only the lease holder writes a run's steps, and the unique (run, index) constraint refuses a
second step at any index, so a step is never half-written and indices stay contiguous. A worker
that lost its lease (the reaper gave the run to another worker) can no longer write: LeaseLost
stops it.

On PostgreSQL that transaction is one call of a function, sent in one round trip, that checks
the lease under the run's advisory lock (see migration 0010) and returns the run's cancel flag,
which the loop checks at the next turn. The run's counters (steps, tokens) are the recorder's:
the heartbeat writes them at most once a second, and ``update_run`` with every change of the run.
"""

import functools
import json
import logging
import math
import re
import time
from contextlib import nullcontext
from dataclasses import replace
from typing import Any

from django.db import (
    DEFAULT_DB_ALIAS,
    InterfaceError,
    OperationalError,
    connection,
    connections,
    models,
    transaction,
)
from django.db.models import Max, Sum
from django.utils import timezone

from feedback.logging import current_step
from feedback.models import Run, Step, StepAttempt
from feedback.privacy import mask_text

from .errors import error_signature
from .invoker import Attempt, Outcome
from .lease import LeaseLost
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


# On PostgreSQL the whole write is one call of a function (migrations 0007 and 0010 say why): the
# lease checked under the run's advisory lock, then the step and its attempts inserted from JSON,
# in one statement and one round trip.
_WRITE_STEP = "SELECT * FROM feedback_write_step(%s::bigint, %s::text, %s::text, %s::integer, %s::jsonb, %s::jsonb)"
# Elsewhere (SQLite), the lease is checked by a statement of its own: the UPDATE takes the
# database's one write lock until the step is committed and returns the cancel flag. The index is
# the recorder's count there too, and the run's counters come as on PostgreSQL.
_CHECK_LEASE = (
    f"UPDATE {Run._meta.db_table} SET heartbeat_at = %s"
    " WHERE id = %s AND worker = %s AND status = %s RETURNING cancel_requested"
)
_STEP_FIELDS = [f for f in Step._meta.concrete_fields if f.name not in ("id", "run", "index")]
_ATTEMPT_FIELDS = [f for f in StepAttempt._meta.concrete_fields if f.name not in ("id", "step")]


def _columns(fields: list[models.Field]) -> list[tuple[str, str, bool]]:
    return [(f.attname, f.column, isinstance(f, models.DateTimeField)) for f in fields]


_STEP_COLUMNS = _columns(_STEP_FIELDS)
_ATTEMPT_COLUMNS = _columns(_ATTEMPT_FIELDS)


def _record(values: dict[str, Any], columns: list[tuple[str, str, bool]]) -> dict[str, Any]:
    """Field values as jsonb_populate_record reads a row: by column, timestamps in ISO 8601 (with
    their offset), JSON fields as they are (anything else JSON cannot hold fails, as in the ORM)."""
    record = {}
    for attname, column, is_time in columns:
        value = values[attname]
        record[column] = value.isoformat() if is_time and value is not None else value
    return record


@functools.cache
def _step_template() -> tuple[list[Any], list[tuple[int, Any]], dict[str, int], int]:
    fields = Step._meta.concrete_fields
    constant = [None if f.has_default() and callable(f.default) else f.get_default() for f in fields]
    made = [(i, f.get_default) for i, f in enumerate(fields) if f.has_default() and callable(f.default)]
    positions = {name: i for i, f in enumerate(fields) for name in (f.name, f.attname)}
    return constant, made, positions, positions["run"]


def _new_step(run: Run, fields: dict[str, Any]) -> Step:
    """``Step(run=run, **fields)`` by position, the way the ORM makes the rows it reads: the
    keyword path cost as much as the rest of the step's Python."""
    constant, made, positions, run_position = _step_template()
    values = list(constant)
    for i, get_default in made:
        values[i] = get_default()
    for name, value in fields.items():
        position = positions.get(name)
        if position is None or position == run_position:
            raise TypeError(f"Step() got an unexpected keyword argument {name!r}")
        values[position] = value
    values[run_position] = run.pk
    step = Step(*values)
    Step.run.field.set_cached_value(step, run)
    return step


def _kept_attempts(tries: list) -> list:
    """The attempt rows a step keeps: every attempt, once one failed. A call that succeeded at
    once is its step (the model's calls were always recorded so)."""
    return tries if any(t.error for t in tries) else []


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
        # The index of the next step (the run's step count) and its token totals; None until
        # read from the steps or set for a fresh run. Only this lease writes the run's steps, so
        # the counts stay exact; the run row gets them from ``counters``.
        self.step_count: int | None = None
        self.tokens_in = self.tokens_out = 0
        # The run's cancel flag as last read or returned by a step write.
        self.cancel_requested = False
        self._written_since_progress = False
        self._step_cursor, self._cursor_of = None, None
        # This thread's connection itself: ``django.db.connection`` looks it up at every use,
        # a dozen times a step.
        self.db = connections[DEFAULT_DB_ALIAS]

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
        if self.step_count is not None:
            self.cancel_requested = Run.objects.values_list("cancel_requested", flat=True).get(pk=self.run.pk)
            return
        # Counted from the steps themselves: a worker that died may have left the run's
        # counters up to a second behind.
        seen = (
            Run.objects.filter(pk=self.run.pk)
            .values("cancel_requested")
            .annotate(last=Max("steps__index"), read_in=Sum("steps__tokens_in"), read_out=Sum("steps__tokens_out"))
            .get()
        )
        self.cancel_requested = seen["cancel_requested"]
        self.step_count = 0 if seen["last"] is None else seen["last"] + 1
        self.tokens_in, self.tokens_out = seen["read_in"] or 0, seen["read_out"] or 0

    def start_fresh(self) -> None:
        """The run was just claimed, not cancelled, and has no steps yet (no system prompt
        either): nothing to count or read before its first turn."""
        self.step_count, self.tokens_in, self.tokens_out = 0, 0, 0
        self._written_since_progress = True

    def counters(self) -> dict[str, int]:
        """The run's counters as this worker knows them (empty until it does)."""
        if self.step_count is None:
            return {}
        return {"step_count": self.step_count, "tokens_in": self.tokens_in, "tokens_out": self.tokens_out}

    def _counted(self, step: Step) -> None:
        self.step_count = step.index + 1
        self.tokens_in += step.tokens_in
        self.tokens_out += step.tokens_out

    def step(self, tries: list[Attempt] | list[LLMAttempt] = (), **fields: Any) -> Step:
        """Write the next step; ``tries`` are its attempt rows (tool or model call).

        A dropped database connection (server restart, network cut, terminated backend) rolls the
        transaction back whole, so the write is retried on a fresh connection. If the commit went
        through but its acknowledgement was lost, the retry finds the step already there."""
        fields.setdefault("attempts", max(1, len(tries)))
        # Personal data and secrets never reach the database (the tool already had the real values).
        fields.update({k: storable(fields[k]) for k in _MASKED_STEP_FIELDS if k in fields})
        step = _new_step(self.run, fields)
        for attempt in range(1, DB_WRITE_ATTEMPTS + 1):
            try:
                if self.step_count is None:
                    self._read_progress()
                # Only this lease writes the run's steps: the counter is the index this step
                # gets, and a step already there means a failed attempt committed after all.
                if attempt > 1 and (existing := self.run.steps.filter(index=self.step_count).first()):
                    step = existing
                else:
                    self._write_step(step, _kept_attempts(tries))
                self._counted(step)
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
        db = self.db
        if db.vendor != "postgresql":
            return self._write_step_in_a_transaction(step, tries)
        attempts = [_record(_attempt_fields(a), _ATTEMPT_COLUMNS) for a in tries]
        step.index = self.step_count
        params = [
            self.run.pk,
            self.lease,
            Run.Status.RUNNING,
            step.index,
            # JSON text, cast to jsonb in the call: psycopg's Jsonb adapter took three times as
            # long to quote the same documents.
            json.dumps(_record(vars(step), _STEP_COLUMNS)),
            json.dumps(attempts),
        ]
        # Inside a caller's transaction (a test's), a savepoint keeps a failed write from
        # aborting it, as before; alone, the statement is its own transaction.
        savepoint = transaction.atomic() if db.in_atomic_block else nullcontext()
        with savepoint:
            cursor = self._cursor()
            cursor.execute(_WRITE_STEP, params)
            row = cursor.fetchone()
        if row is None:
            raise self._lost()
        step.pk, self.cancel_requested = row
        step._state.adding, step._state.db = False, db.alias

    def _lost(self) -> LeaseLost:
        return LeaseLost(f"run {self.run.pk} is no longer leased to {self.lease}")

    def _cursor(self) -> Any:
        """The run's cursor, kept while its connection lasts: opening one per step cost a third
        as much as the statement it sends."""
        if self._cursor_of is None or self._cursor_of is not self.db.connection:
            self._step_cursor = self.db.cursor()
            self._cursor_of = self.db.connection
        return self._step_cursor

    def _write_step_in_a_transaction(self, step: Step, tries: list) -> None:
        # SQLite (the embedded default) has no such function: the same writes, one by one.
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute(_CHECK_LEASE, [timezone.now(), self.run.pk, self.lease, Run.Status.RUNNING])
                owner = cursor.fetchone()
            if owner is None:
                raise self._lost()
            # pk None: a retry after a rolled-back attempt inserts afresh.
            step.pk, step.index = None, self.step_count
            step.save(force_insert=True)
            if tries:
                StepAttempt.objects.bulk_create(StepAttempt(step=step, **_attempt_fields(a)) for a in tries)
        self.cancel_requested = bool(owner[0])

    def tool_call(self, turn: int, call: ToolCall, outcome: Outcome, note: str = "") -> Step:
        try:
            return self._tool_call(turn, call, outcome, note)
        except (ValueError, TypeError, RecursionError) as exc:
            # Arguments or a result no JSON column can hold (nested a thousand deep, say) fail the
            # call, not the run: the model reads why; the step keeps the call as the model wrote it.
            logger.warning("a tool call could not be recorded as it was", exc_info=True)
            unrecordable = replace(
                outcome, arguments=call.arguments, ok=False, result=None, validation=None,
                error=f"The call could not be recorded ({type(exc).__name__}: {str(exc)[:200]}).",
                error_class="UnrecordableCall",
            )  # fmt: skip
            return self._tool_call(turn, call, unrecordable, note)

    def _tool_call(self, turn: int, call: ToolCall, outcome: Outcome, note: str) -> Step:
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
        """Change the run's row under the lease, with its counters (values only, no expressions)."""
        fields = {k: storable(v) if k in _MASKED_RUN_FIELDS else v for k, v in fields.items()}
        fields.update(self.counters())
        sql, columns = _run_update(tuple(fields))
        params = [f.get_db_prep_save(fields[f.name], connection) for f in columns]
        with connection.cursor() as cursor:
            cursor.execute(sql, [*params, self.run.pk, self.lease])
            if cursor.rowcount != 1:
                raise self._lost()
        for name, value in fields.items():
            setattr(self.run, name, value)


@functools.cache
def _run_update(names: tuple[str, ...]) -> tuple[str, list[models.Field]]:
    """The UPDATE of these run fields under a lease, as the ORM would send it, built once per set
    of fields: compiling it took the ORM longer than a step of a zero-latency run."""
    columns = [Run._meta.get_field(name) for name in names]
    quote = connection.ops.quote_name
    assignments = ", ".join(f"{quote(f.column)} = %s" for f in columns)
    where = f"{quote('id')} = %s AND {quote('worker')} = %s"
    return f"UPDATE {quote(Run._meta.db_table)} SET {assignments} WHERE {where}", columns
