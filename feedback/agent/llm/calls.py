"""A model call as a timed step: when it started, how long it took, its tokens, and each attempt.

Retries are tenacity's: only transient errors (429, 5xx, timeouts, connection) are tried again,
LLM_MAX_ATTEMPTS in all, with exponential backoff and "equal jitter" (half of each wait certain,
half random: full jitter could spend every attempt within milliseconds and fail a run on a short
outage; this way a run rides out an outage of at least
LLM_BACKOFF_SECONDS * (2 ** (LLM_MAX_ATTEMPTS - 1) - 1) / 2). Its hooks record each attempt as
the step keeps it (a StepAttempt row).
"""

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.utils import timezone
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt

from feedback.retrying import backoff

from .reply import ChatModel, LLMAttempt, LLMError, LLMReply

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelCall:
    """One model call, retries and their waits included: its reply, or the error it gave up on."""

    started_at: datetime
    finished_at: datetime
    reply: LLMReply | None
    error: LLMError | None
    # Every attempt, the one that succeeded too, once one failed; none when the first succeeded
    # (a call that succeeded at once is its step).
    attempts: list[LLMAttempt] = field(default_factory=list)

    @property
    def duration_ms(self) -> int:
        return max(0, int((self.finished_at - self.started_at).total_seconds() * 1000))

    def step_fields(self) -> dict[str, Any]:
        """What the turn's model-call step records of it."""
        reply = self.reply or LLMReply()
        return {
            "tries": self.attempts,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "duration_ms": self.duration_ms,
            "tokens_in": reply.tokens_in,
            "tokens_out": reply.tokens_out,
        }


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, LLMError) and exc.retryable


class _Attempts:
    """Tenacity's hooks: each attempt's start (``before``) and, when it failed, its row (``after``)."""

    def __init__(self) -> None:
        self.rows: list[LLMAttempt] = []
        self._started_at = timezone.now()
        self._t0 = time.monotonic()

    def before(self, state: RetryCallState) -> None:
        self._started_at, self._t0 = timezone.now(), time.monotonic()

    def after(self, state: RetryCallState) -> None:
        self.ended(state.outcome.exception() if state.outcome else None)

    def ended(self, error: BaseException | None) -> None:
        duration = int((time.monotonic() - self._t0) * 1000)
        retryable = isinstance(error, LLMError) and error.retryable
        self.rows.append(LLMAttempt(len(self.rows) + 1, self._started_at, duration, str(error or ""), retryable))


def _say_retry(state: RetryCallState) -> None:
    logger.warning(
        "model call failed (attempt %d of %d), retrying in %.2f s: %s",
        state.attempt_number,
        settings.LLM_MAX_ATTEMPTS,
        state.upcoming_sleep,
        state.outcome.exception() if state.outcome else "",
    )


def call_model(model: ChatModel, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelCall:
    """Call ``model``, retrying transient errors; the call's times, reply or error, and attempts."""
    attempts = _Attempts()
    retrying = Retrying(
        retry=retry_if_exception(_retryable),
        stop=stop_after_attempt(settings.LLM_MAX_ATTEMPTS),
        wait=backoff(settings.LLM_BACKOFF_SECONDS),
        before=attempts.before,
        # Called after each failed attempt tenacity may retry (the last one too): the others
        # (a success, an error that is not retried) are recorded below.
        after=attempts.after,
        before_sleep=_say_retry,
        reraise=True,
    )
    started_at = timezone.now()
    try:
        reply = retrying(model.complete, messages, tools)
    except LLMError as exc:
        if not exc.retryable:
            attempts.ended(exc)
        return ModelCall(started_at, timezone.now(), None, exc, attempts.rows)
    if attempts.rows:
        attempts.ended(None)
    return ModelCall(started_at, timezone.now(), reply, None, attempts.rows)
