"""Rate limits of the API: requests per token, and failed authentications per client address.

A limit is "N/period" (``API_RATE_LIMIT=300/min``, ``API_AUTH_FAILURE_LIMIT=20/15min``): at most
N events in each fixed window of that period, counted in the shared cache (Redis in production:
``add`` then ``incr``, atomic, so concurrent requests on many web processes count once each). A
fixed window lets a client spend N at the end of one window and N at the start of the next: at
most twice the rate over a short span, for one cache key per client and no history to rewrite.
"""

import math
import re
import time
from dataclasses import dataclass

from django.core.cache import cache
from django.core.exceptions import ImproperlyConfigured

_PERIODS = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60, "h": 3600, "hour": 3600,
            "d": 86400, "day": 86400}  # fmt: skip
_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d*)\s*([a-z]+?)s?\s*$")


@dataclass(frozen=True)
class Rate:
    count: int
    seconds: int


def parse_rate(text: str, *, setting: str) -> Rate | None:
    """``"300/min"``, ``"20/15min"``, ``"5/s"``, ``"1000/hour"``, ``"10000/day"``; ``""`` or ``"0"``:
    no limit (None). A value it cannot read is a configuration error naming the ``setting``."""
    if text.strip() in ("", "0"):
        return None
    match = _RATE.match(text.lower())
    if match is None or match.group(3) not in _PERIODS or int(match.group(2) or 1) < 1:
        raise ImproperlyConfigured(f'{setting}={text!r}: write N/period, e.g. "300/min" or "20/15min".')
    return Rate(count=int(match.group(1)), seconds=int(match.group(2) or 1) * _PERIODS[match.group(3)])


def _window(key: str, rate: Rate) -> tuple[str, float]:
    """The cache key of the current window for ``key`` and the seconds until that window ends."""
    now = time.time()
    number = int(now // rate.seconds)
    return f"api-limit:{key}:{rate.seconds}:{number}", (number + 1) * rate.seconds - now


def count(key: str, rate: Rate) -> int | None:
    """Count one event for ``key``; past the limit, the seconds to wait (whole, at least 1)."""
    cache_key, left = _window(key, rate)
    cache.add(cache_key, 0, timeout=rate.seconds + 1)
    try:
        seen = cache.incr(cache_key)
    except ValueError:  # expired between add and incr: this is the window's first event
        cache.set(cache_key, 1, timeout=rate.seconds + 1)
        seen = 1
    return max(1, math.ceil(left)) if seen > rate.count else None


def exceeded(key: str, rate: Rate) -> int | None:
    """Whether ``key`` has used up its events in this window (without counting one): the seconds
    to wait if it has, None otherwise."""
    cache_key, left = _window(key, rate)
    return max(1, math.ceil(left)) if (cache.get(cache_key) or 0) >= rate.count else None
