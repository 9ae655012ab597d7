"""Writes a run's steps as they happen, under the worker's lease.

Each step and the run's step counter are written in one transaction, with the run row locked,
so a step is never half-written and indices stay contiguous. A worker that lost its lease
(the reaper gave the run to another worker) can no longer write: LeaseLost stops it.
"""

import os
import socket
import threading
import uuid
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connection, transaction
from django.utils import timezone

from feedback.logging import current_step
from feedback.models import Run, Step, StepAttempt

from .errors import error_signature
from .invoker import Attempt, Outcome
from .llm import LLMAttempt, ToolCall


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
        """Write the next step; ``tries`` are its attempt rows (tool or model call)."""
        fields.setdefault("attempts", max(1, len(tries)))
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
            step = Step.objects.create(run=self.run, index=owner[0] - 1, **fields)
            if tries:
                StepAttempt.objects.bulk_create(
                    StepAttempt(
                        step=step,
                        number=a.number,
                        started_at=a.started_at,
                        duration_ms=a.duration_ms,
                        error=a.error,
                        error_class=getattr(a, "error_class", "") or ("LLMError" if a.error else ""),
                        retryable=a.retryable,
                    )
                    for a in tries
                )
        current_step.set(step.index)
        if self.steps is not None:
            self.steps.append(step)
        return step

    def tool_call(self, turn: int, call: ToolCall, outcome: Outcome) -> Step:
        finished = outcome.finished_at or timezone.now()
        return self.step(
            tries=outcome.attempts,
            turn=turn,
            kind=Step.Kind.TOOL_CALL,
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
                Run.objects.filter(pk=self.run_id, worker=self.lease).update(heartbeat_at=timezone.now())
        finally:
            connection.close()

    def stop(self) -> None:
        self._stop_event.set()
