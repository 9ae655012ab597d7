"""Writes a run's steps as they happen, under the worker's lease.

Each step and the run's step counter are written in one transaction, with the run row locked,
so a step is never half-written and indices stay contiguous. A worker that lost its lease
(the reaper gave the run to another worker) can no longer write: LeaseLost stops it.
"""

import logging
import math
import os
import socket
import threading
import time
import uuid
from typing import Any

from django.conf import settings
from django.db import InterfaceError, OperationalError, close_old_connections, connection, transaction
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


def storable(value: Any) -> Any:
    """``value`` as PostgreSQL can store it and privacy allows: masked, without the NUL
    characters text and jsonb columns refuse, without NaN or infinite numbers jsonb refuses.
    Model output and tool results are hostile input: none of this may crash a run."""
    if isinstance(value, str):
        return mask_text(value).replace("\x00", "\ufffd")
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


# One statement claims the next index under the lease: the UPDATE locks the run row until the
# step is committed (so indices stay contiguous) and returns the counter, where a SELECT ... FOR
# UPDATE then an UPDATE took two round trips per step.
_NEXT_INDEX = (
    f"UPDATE {Run._meta.db_table} SET step_count = step_count + 1, heartbeat_at = %s,"
    " tokens_in = tokens_in + %s, tokens_out = tokens_out + %s"
    " WHERE id = %s AND worker = %s AND status = %s RETURNING step_count"
)


class Recorder:
    def __init__(self, run: Run, lease: str) -> None:
        self.run = run
        self.lease = lease
        # The steps of the run, when the loop has loaded them: every step written here is
        # appended, so the conversation is rebuilt without reading them back each turn.
        self.steps: list[Step] | None = None

    def step(self, tries: list[Attempt] | list[LLMAttempt] = (), **fields: Any) -> Step:
        """Write the next step; ``tries`` are its attempt rows (tool or model call).

        A dropped database connection (server restart, network cut, terminated backend) rolls the
        transaction back whole, so the write is retried on a fresh connection. If the commit went
        through but its acknowledgement was lost, the retry finds the step already there."""
        fields.setdefault("attempts", max(1, len(tries)))
        # Personal data and secrets never reach the database (the tool already had the real values).
        fields.update({k: storable(fields[k]) for k in _MASKED_STEP_FIELDS if k in fields})
        seen: list[int] = []
        for attempt in range(1, DB_WRITE_ATTEMPTS + 1):
            try:
                step = self._write_step(tries, fields, seen)
                break
            except (OperationalError, InterfaceError):
                if connection.in_atomic_block or attempt == DB_WRITE_ATTEMPTS:
                    raise
                logger.warning("the database connection dropped while writing a step; retrying", exc_info=True)
                connection.close()
                time.sleep(DB_RETRY_SECONDS * attempt)
        current_step.set(step.index)
        if self.steps is not None:
            self.steps.append(step)
        return step

    def _write_step(self, tries: list, fields: dict[str, Any], seen: list[int]) -> Step:
        if seen:
            # Only this lease writes this run's steps: a step at the index our failed attempt
            # claimed means that attempt committed after all.
            existing = Step.objects.filter(run_id=self.run.pk, index=seen[0]).first()
            if existing is not None:
                return existing
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute(
                    _NEXT_INDEX,
                    [
                        timezone.now(),
                        fields.get("tokens_in", 0),
                        fields.get("tokens_out", 0),
                        self.run.pk,
                        self.lease,
                        Run.Status.RUNNING,
                    ],
                )
                owner = cursor.fetchone()
            if owner is None:
                raise LeaseLost(f"run {self.run.pk} is no longer leased to {self.lease}")
            index = owner[0] - 1
            seen[:] = [index]
            step = Step.objects.create(run=self.run, index=index, **fields)
            if tries:
                StepAttempt.objects.bulk_create(
                    StepAttempt(
                        step=step,
                        number=a.number,
                        started_at=a.started_at,
                        duration_ms=a.duration_ms,
                        error=storable(a.error),
                        error_class=getattr(a, "error_class", "") or ("LLMError" if a.error else ""),
                        retryable=a.retryable,
                    )
                    for a in tries
                )
        return step

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
