"""Rate limits of the API, by django-ninja's throttles (``ninja.throttling``): requests per token
(``API_RATE_LIMIT``, ``TokenThrottle`` on the NinjaAPI, so every endpoint has it) and failed
authentications per client address (``API_AUTH_FAILURE_LIMIT``, ``AuthFailureThrottle``, which
the token check asks itself: see there why).

A ninja throttle here counts each client's requests in a window that starts with its first one
and lasts the rate's period, with the cache's atomic operations (``add`` and ``incr``: one Redis
command each in production), so requests of one client arriving together are each counted:
ninja's own throttles read a list of request times and write it back, and concurrent requests
read the same list (8 threads of one token passed 450 of 800 requests against a limit of 100;
Django REST Framework, whose throttles ninja's follow, says the same of its own:
encode/django-rest-framework#8127). The embedded default's file cache has no atomic increment:
there the count can fall short under concurrent requests of one client. A token is 256 random
bits: no rate makes guessing one work.
"""

import math
import threading
from typing import Any

from django.conf import settings
from django.http import HttpRequest
from ninja.throttling import SimpleRateThrottle

from agentsite.environment import NO_LIMIT
from feedback.throttle import client_address

LIMIT_SETTINGS = ("API_RATE_LIMIT", "API_AUTH_FAILURE_LIMIT")


def _per_thread(name: str) -> property:
    return property(lambda self: getattr(self._local, name), lambda self, value: setattr(self._local, name, value))


class SettingRateThrottle(SimpleRateThrottle):
    """A ninja throttle whose rate is the Django setting ``setting`` ("0": no limit), read on each
    request, counted atomically (see the module's docstring), and whose state during a request is
    the thread's own: the threads of a web process share the throttle object (gunicorn --threads)."""

    setting: str
    key = _per_thread("key")
    now = _per_thread("now")
    started = _per_thread("started")

    def __init__(self) -> None:  # the rate is read per request, not fixed here
        self._local = threading.local()

    def _rate(self) -> bool:
        """Read the rate; False when there is no limit."""
        rate = getattr(settings, self.setting).strip()
        if rate in NO_LIMIT:
            return False
        self.num_requests, self.duration = self.parse_rate(rate)
        return True

    def _window(self, request: HttpRequest) -> None:
        self.key = self.get_cache_key(request)
        self.now = self.timer()
        # The window's start, kept as long as its count: the first request of a window sets both.
        self.cache.add(f"{self.key}:start", self.now, self.duration)
        self.started = self.cache.get(f"{self.key}:start", self.now)

    def _count(self) -> int:
        """This request counted in its window; how many the window holds now."""
        self.cache.add(self.key, 0, self.duration)
        try:
            return self.cache.incr(self.key)
        except ValueError:  # the window ended between the two calls
            self.cache.set(self.key, 1, self.duration)
            return 1

    def allow_request(self, request: HttpRequest) -> bool:
        if not self._rate():
            return True
        self._window(request)
        return self._count() <= self.num_requests

    def wait(self) -> float:
        """The seconds until the window ends (called once refused): a 429 always says when."""
        return max(1.0, self.duration - (self.now - self.started))


class TokenThrottle(SettingRateThrottle):
    """``API_RATE_LIMIT`` requests per token. ninja's AuthRateThrottle keys a caller by
    ``str(request.auth)``, which for a token is its name and first characters: two tokens could
    share them, so the key here is the token's id."""

    setting = "API_RATE_LIMIT"
    scope = "token"

    def get_cache_key(self, request: HttpRequest) -> str:
        return self.cache_format % {"scope": self.scope, "ident": request.auth.pk}


class AuthFailureThrottle(SettingRateThrottle):
    """``API_AUTH_FAILURE_LIMIT`` failed authentications per client address (as the login
    lockout sees it: LOGIN_CLIENT_IP_HEADER). Not one of the NinjaAPI's throttles: those run
    after a successful authentication and count the requests they let through, while a failure
    is known only inside the token check, and an address past its limit must be refused before
    its token is looked at (a 429 for a good token and a 401 for a bad one would tell a hit from
    a guess). So the token check asks it: ``refusal`` first, ``record`` when a token fails."""

    setting = "API_AUTH_FAILURE_LIMIT"
    scope = "auth-failures"

    def get_cache_key(self, request: HttpRequest) -> str:
        return self.cache_format % {"scope": self.scope, "ident": client_address(request)}

    def refusal(self, request: HttpRequest) -> int | None:
        """The whole seconds to wait if the address is past its limit, None otherwise; counts nothing."""
        if not self._rate():
            return None
        self._window(request)
        past = (self.cache.get(self.key) or 0) >= self.num_requests
        return math.ceil(self.wait()) if past else None

    def record(self, request: HttpRequest) -> None:
        """Count one failed authentication of the address."""
        if self._rate():
            self._window(request)
            self._count()


def document_limits(document: dict[str, Any]) -> dict[str, Any]:
    """The limits in the OpenAPI ``document``: their values in its description, and on every 429
    answer its Retry-After header."""
    rate, failures = (getattr(settings, name).strip() or "0" for name in LIMIT_SETTINGS)
    document["info"]["description"] += (
        f"\n\n**Limits.** Each token may make `API_RATE_LIMIT` requests (here `{rate}`; `0`: no limit); "
        f"each client address may fail to authenticate `API_AUTH_FAILURE_LIMIT` times (here `{failures}`), "
        "after which every request from it is refused, good tokens included, until the oldest failure "
        "leaves the period. Past either, `429` with `Retry-After`: the seconds to wait."
    )
    retry_after = {
        "description": "The seconds to wait before the next request can pass.",
        "required": True,
        "schema": {"type": "integer", "minimum": 1},
    }
    for operations in document["paths"].values():
        for operation in operations.values():
            if too_many := operation.get("responses", {}).get(429):
                too_many["headers"] = {"Retry-After": retry_after}
    return document
