"""A circuit breaker per tool, kept in the shared cache so every worker process sees one state.

Closed: calls go through and failures are counted. After ``failures`` consecutive transient
failures it opens for ``reset_seconds``: calls are refused without touching the failing
service. Then one call is let through (half-open); success closes it, failure re-opens it.

The invoker reads both keys before a call (``read``) and clears them after a success only when
that read (or the call itself) found something to clear: a healthy tool costs one read per call
and no write.
"""

import time
from dataclasses import dataclass

from django.conf import settings
from django.core.cache import cache


@dataclass(frozen=True)
class BreakerState:
    """The shared state as one read saw it."""

    failures: int = 0
    open_until: float | None = None

    @property
    def open(self) -> bool:
        return self.open_until is not None and time.time() < self.open_until

    @property
    def dirty(self) -> bool:
        """Whether a success has anything to reset."""
        return bool(self.failures) or self.open_until is not None


class CircuitBreaker:
    def __init__(self, name: str, *, failures: int | None = None, reset_seconds: float | None = None):
        self.name = name
        self.threshold = failures or settings.TOOL_BREAKER_FAILURES
        self.reset_seconds = reset_seconds or settings.TOOL_BREAKER_RESET_SECONDS
        self._failures_key = f"breaker:{name}:failures"
        self._open_key = f"breaker:{name}:open-until"

    def read(self) -> BreakerState:
        found = cache.get_many([self._failures_key, self._open_key])
        return BreakerState(found.get(self._failures_key, 0), found.get(self._open_key))

    def is_open(self) -> bool:
        return self.read().open

    def allow(self) -> bool:
        return not self.is_open()

    def failures(self) -> int:
        return self.read().failures

    def record_success(self) -> None:
        cache.delete_many([self._failures_key, self._open_key])

    def record_failure(self) -> None:
        # add-then-incr is atomic on Redis and good enough on the file cache of one machine.
        cache.add(self._failures_key, 0, timeout=int(self.reset_seconds * 10))
        try:
            count = cache.incr(self._failures_key)
        except ValueError:  # expired between add and incr
            cache.set(self._failures_key, 1, timeout=int(self.reset_seconds * 10))
            count = 1
        if count >= self.threshold:
            cache.set(self._open_key, time.time() + self.reset_seconds, timeout=int(self.reset_seconds) + 1)

    def state(self) -> str:
        seen = self.read()
        if seen.open:
            return "open"
        return "half-open" if seen.failures >= self.threshold else "closed"
