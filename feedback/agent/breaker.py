"""A circuit breaker per tool, kept in the shared cache so every worker process sees one state.

Closed: calls go through and failures are counted. After ``failures`` consecutive transient
failures it opens for ``reset_seconds``: calls are refused without touching the failing
service. Then one call is let through (half-open); success closes it, failure re-opens it.
"""

import time

from django.conf import settings
from django.core.cache import cache


class CircuitBreaker:
    def __init__(self, name: str, *, failures: int | None = None, reset_seconds: float | None = None):
        self.name = name
        self.threshold = failures or settings.TOOL_BREAKER_FAILURES
        self.reset_seconds = reset_seconds or settings.TOOL_BREAKER_RESET_SECONDS
        self._failures_key = f"breaker:{name}:failures"
        self._open_key = f"breaker:{name}:open-until"

    def is_open(self) -> bool:
        open_until = cache.get(self._open_key)
        return open_until is not None and time.time() < open_until

    def allow(self) -> bool:
        return not self.is_open()

    def failures(self) -> int:
        return cache.get(self._failures_key, 0)

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
        if self.is_open():
            return "open"
        return "half-open" if self.failures() >= self.threshold else "closed"
