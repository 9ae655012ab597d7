"""Writes a run's steps, and the changes of its row, as they happen, under the worker's lease.

A step is written in one transaction with its attempt rows and the run's counters: first the
conditional UPDATE of the run's row that checks the lease (see lease.py) and sets its step count
and tokens, then the step at the index the worker counted (the unique (run, index) constraint
refuses a second step at any index). So a step is never half-written, indices stay contiguous,
and the run's counters always equal its steps. Every write under the lease survives a dropped
connection (``retrying``).

The steps of a turn written together, with what they change in the run's row (its end, its
plan), share one transaction (a BEGIN, the UPDATE, the INSERTs, a COMMIT). The cancel flag is
not the recorder's: the loop reads it plainly at every turn (feedback/lifecycle.py).
"""

import logging
import math
import re
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from django.db import InterfaceError, OperationalError, connection, transaction
from django.db.models import Count, Max, Q, Sum
from django.utils import timezone
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt

from feedback import costs
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


# A write is tried this many times, on a fresh connection each time the connection drops.
DB_WRITE_ATTEMPTS = 4
DB_RETRY_SECONDS = 0.5


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


def _reconnectable(exc: BaseException) -> bool:
    # Inside a caller's transaction (a test's) nothing can be run again: the error goes up.
    return isinstance(exc, OperationalError | InterfaceError) and not connection.in_atomic_block


def retrying[T](operation: Callable[[], T], *, what: str, recover: Callable[[], T | None] | None = None) -> T:
    """``operation``, run again on a fresh connection when the connection drops under it (a
    server restart, a failover, a terminated backend): its transaction rolled back whole, so
    running it again is safe. ``recover``, before each retry, finds what an attempt did if it
    committed although its acknowledgement was lost (so nothing is written twice).

    Django checks connections (CONN_HEALTH_CHECKS) only between requests and tasks; a run is one
    long task, so its writes and its turn's read check here. DB_WRITE_ATTEMPTS in all, waiting
    DB_RETRY_SECONDS longer each time (feedback/retrying.py's policy; one worker per run, so no
    jitter is needed), each dropped connection logged and closed before the next attempt."""

    def dropped(state: RetryCallState) -> None:
        logger.warning(
            "the database connection dropped while %s (attempt %d of %d); retrying",
            what,
            state.attempt_number,
            DB_WRITE_ATTEMPTS,
            exc_info=state.outcome.exception(),
        )
        connection.close()

    retry = Retrying(
        retry=retry_if_exception(_reconnectable),
        stop=stop_after_attempt(DB_WRITE_ATTEMPTS),
        # Read at each call: tests set the module's wait to 0.
        wait=lambda s: DB_RETRY_SECONDS * s.attempt_number,
        before_sleep=dropped,
        reraise=True,
    )
    for attempt in retry:
        with attempt:
            found = None
            if attempt.retry_state.attempt_number > 1 and recover is not None:
                found = recover()
            return operation() if found is None else found
    raise AssertionError("unreachable")  # tenacity raises the last error once it stops


class _Unread:
    """The run's price has not been read yet."""


def _added(total: float | None, cost: float | None) -> float | None:
    # One unpriced step makes the run unpriced: a partial sum would read as the run's cost.
    return None if total is None or cost is None else total + cost


class Recorder:
    def __init__(self, run: Run, lease: str) -> None:
        self.run = run
        self.lease = lease
        # The steps of the run, when the loop has loaded them: every step written here is
        # appended, so the conversation is rebuilt without reading them back each turn.
        self.steps: list[Step] | None = None
        # The index of the next step and the run's token totals, as its row has them (they are
        # written with each step); None until counted from the steps or set for a fresh run.
        self.step_count: int | None = None
        self.tokens_in = self.tokens_out = 0
        # The run's cost so far, in US dollars (None: its model has no price), and that price,
        # read once the run's model is known (its first step comes after _prepare records it).
        self.cost: float | None = 0.0
        self._price: costs.Price | type[_Unread] | None = _Unread

    def start_fresh(self) -> None:
        """The run was just claimed and has no steps yet."""
        self.step_count, self.tokens_in, self.tokens_out, self.cost = 0, 0, 0, 0.0

    def progress(self) -> int:
        """The run's step count: counted from its steps once, for a resumed run, then kept."""
        if self.step_count is None:
            retrying(self._read_progress, what="reading the run's progress")
        return self.step_count

    def _read_progress(self) -> None:
        # A resumed run counts from its steps, the one record a dead worker cannot have left behind.
        seen = Run.objects.filter(pk=self.run.pk).aggregate(
            last=Max("steps__index"),
            read_in=Sum("steps__tokens_in"),
            read_out=Sum("steps__tokens_out"),
            cost=Sum("steps__cost"),
            unpriced=Count("steps", filter=Q(steps__cost__isnull=True)),
        )
        self.step_count = 0 if seen["last"] is None else seen["last"] + 1
        self.tokens_in, self.tokens_out = seen["read_in"] or 0, seen["read_out"] or 0
        self.cost = None if seen["unpriced"] else seen["cost"] or 0.0

    def _hold(self, **fields: Any) -> None:
        """Update the run's row under the lease (see lease.py): LeaseLost when it is no longer this
        worker's. Inside a transaction, the row stays locked until the commit."""
        fields["heartbeat_at"] = timezone.now()
        if not Run.objects.filter(pk=self.run.pk, worker=self.lease, status=Run.Status.RUNNING).update(**fields):
            raise LeaseLost(f"run {self.run.pk} is no longer leased to {self.lease}")

    def step(
        self, tries: list[Attempt] | list[LLMAttempt] = (), *, run_fields: dict | None = None, **fields: Any
    ) -> Step:
        """Write the next step; ``tries`` are its attempt rows (tool or model call). ``run_fields``:
        what the step changes in the run's row (its end: status, answer; its plan), written in the
        same transaction."""
        return self.write([(tries, fields)], run_fields=run_fields)[0]

    def write(self, entries: list[tuple[list, dict[str, Any]]], *, run_fields: dict | None = None) -> list[Step]:
        """Write the next steps, each ``(tries, fields)`` as for ``step``, in one transaction: the
        steps of a turn that nothing happens between (its tool calls' outcomes, come together)."""
        if self.step_count is None:
            self.progress()
        price = self._run_price()
        pending, index, tokens_in, tokens_out, cost = [], self.step_count, self.tokens_in, self.tokens_out, self.cost
        for tries, fields in entries:
            fields.setdefault("attempts", max(1, len(tries)))
            # Personal data and secrets never reach the database (the tool already had the real values).
            fields.update({k: storable(fields[k]) for k in _MASKED_STEP_FIELDS if k in fields})
            step = Step(run=self.run, index=index, **fields)
            step.cost = None if price is None else price.of(step.tokens_in, step.tokens_out)
            pending.append((step, [StepAttempt(**_attempt_fields(a)) for a in _kept_attempts(tries)]))
            index, tokens_in, tokens_out = index + 1, tokens_in + step.tokens_in, tokens_out + step.tokens_out
            cost = _added(cost, step.cost)
        counters = {"step_count": index, "tokens_in": tokens_in, "tokens_out": tokens_out, "cost": cost}
        changed = self._masked_run_fields(run_fields or {})
        first = pending[0][0].index
        steps = retrying(
            lambda: self._write_steps(pending, {**counters, **changed}),
            what="writing a step",
            # The steps as stored, when the transaction committed although its acknowledgement was lost.
            recover=lambda: list(self.run.steps.filter(index__gte=first).order_by("index")) or None,
        )
        self.step_count, self.tokens_in, self.tokens_out, self.cost = index, tokens_in, tokens_out, cost
        for name, value in changed.items():
            setattr(self.run, name, value)
        current_step.set(steps[-1].index)
        if self.steps is not None:
            self.steps.extend(steps)
        return steps

    def _write_steps(self, pending: list[tuple[Step, list[StepAttempt]]], run_fields: dict[str, Any]) -> list[Step]:
        """The steps, their attempts and the run's row, in one transaction under the lease."""
        steps = [step for step, _ in pending]
        with transaction.atomic():
            self._hold(**run_fields)
            # Inserted afresh on a retry: the rolled-back attempt's ids were never committed.
            for step in steps:
                step.pk = None
            Step.objects.bulk_create(steps)
            attempts = []
            for step, rows in pending:
                for attempt in rows:
                    attempt.pk, attempt.step = None, step
                    attempts.append(attempt)
            StepAttempt.objects.bulk_create(attempts)
        return steps

    def tool_call(
        self, turn: int, call: ToolCall, outcome: Outcome, note: str = "", run_fields: dict | None = None, **tokens: int
    ) -> Step:
        """The call's step; ``tokens``: the model call's, when this is the first step of its turn;
        ``run_fields``: as for ``step``."""
        try:
            return self._tool_call(turn, call, outcome, note, tokens, run_fields)
        except (ValueError, TypeError, RecursionError) as exc:
            # Arguments or a result no JSON column can hold (nested a thousand deep, say) fail the
            # call, not the run: the model reads why; the step keeps the call as the model wrote it.
            logger.warning("a tool call could not be recorded as it was", exc_info=True)
            unrecordable = replace(
                outcome, arguments=call.arguments, ok=False, result=None, validation=None,
                error=f"The call could not be recorded ({type(exc).__name__}: {str(exc)[:200]}).",
                error_class="UnrecordableCall",
            )  # fmt: skip
            return self._tool_call(turn, call, unrecordable, note, tokens, run_fields)

    def tool_calls(
        self, turn: int, calls: list[tuple[ToolCall, Outcome, str, dict[str, int]]], *, lead: tuple | None = None
    ) -> list[Step]:
        """The steps of calls of one turn whose outcomes came together, ``(call, outcome, note,
        tokens)`` each, written in one transaction; ``lead``, ``(tries, fields)`` as for ``write``:
        a step written first in it (the turn's model call), not among the steps returned."""
        leading = [(lead[0], dict(lead[1]))] if lead else []
        if len(leading) + len(calls) > 1:
            try:
                return self.write([*leading, *(_tool_call_entry(turn, *call) for call in calls)])[len(leading) :]
            except (ValueError, TypeError, RecursionError):
                pass  # one of them cannot be recorded as it is: each on its own, so only that one fails
        if lead:
            self.write([(lead[0], dict(lead[1]))])
        return [self.tool_call(turn, call, outcome, note, **tokens) for call, outcome, note, tokens in calls]

    def _tool_call(
        self, turn: int, call: ToolCall, outcome: Outcome, note: str, tokens: dict[str, int], run_fields: dict | None
    ) -> Step:
        tries, fields = _tool_call_entry(turn, call, outcome, note, tokens)
        return self.step(tries, run_fields=run_fields, **fields)

    def _run_price(self) -> "costs.Price | None":
        if self._price is _Unread:
            self._price = retrying(
                lambda: costs.price_for(backend=self.run.llm_backend, model_name=self.run.model_name),
                what="reading the model's price",
            )
        return self._price

    @staticmethod
    def _masked_run_fields(fields: dict[str, Any]) -> dict[str, Any]:
        return {k: storable(v) if k in _MASKED_RUN_FIELDS else v for k, v in fields.items()}

    def update_run(self, **fields: Any) -> None:
        """Change the run's row under the lease."""
        fields = self._masked_run_fields(fields)
        retrying(lambda: self._hold(**fields), what="updating the run")
        for name, value in fields.items():
            setattr(self.run, name, value)


def _tool_call_entry(
    turn: int, call: ToolCall, outcome: Outcome, note: str, tokens: dict[str, int]
) -> tuple[list[Attempt], dict[str, Any]]:
    """A tool call's step as ``Recorder.write`` takes it: its attempts and its fields."""
    finished = outcome.finished_at or timezone.now()
    return outcome.attempts, dict(
        **tokens,
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
