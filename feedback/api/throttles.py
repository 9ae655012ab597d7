"""Rate limits of the API, by django-ninja's throttles (``ninja.throttling``): requests per token
(``API_RATE_LIMIT``, ``TokenThrottle`` on the NinjaAPI, so every endpoint has it) and failed
authentications per client address (``API_AUTH_FAILURE_LIMIT``, ``AuthFailureThrottle``, which
the token check asks itself: see there why).

A ninja throttle keeps each client's request times within the period in the shared cache (Redis
in production): a sliding window. Each request reads that list and writes it back with its own
time, so requests of one client arriving together can each read the same list and the last write
wins: concurrent requests are undercounted. The limits keep a client to its fair share; they are
not a lock (as Django REST Framework, whose throttles ninja's follow, says of its own:
encode/django-rest-framework#8127). A token is 256 random bits: no rate makes guessing one work.
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
    request, and whose state during a request is the thread's own: ninja keeps a request's key,
    history and clock reading on the throttle object, which the threads of a web process share
    (gunicorn --threads), so one request could decide on another's history and write it under
    its own key."""

    setting: str
    key = _per_thread("key")
    history = _per_thread("history")
    now = _per_thread("now")

    def __init__(self) -> None:  # the rate is read per request, not fixed here
        self._local = threading.local()

    def allow_request(self, request: HttpRequest) -> bool:
        rate = getattr(settings, self.setting)
        if rate.strip() in NO_LIMIT:
            return True
        self.num_requests, self.duration = self.parse_rate(rate.strip())
        return super().allow_request(request)

    def wait(self) -> float:
        """The seconds until the request that filled the window leaves it (called once refused).
        ninja's own answer is None once a window holds more requests than the rate allows (a rate
        lowered while they were counted), and a 429 always says when to come back."""
        return max(1.0, self.duration - (self.now - self.history[self.num_requests - 1]))


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
    recording = _per_thread("recording")

    def get_cache_key(self, request: HttpRequest) -> str:
        return self.cache_format % {"scope": self.scope, "ident": client_address(request)}

    def refusal(self, request: HttpRequest) -> int | None:
        """The whole seconds to wait if the address is past its limit, None otherwise; counts nothing."""
        self.recording = False
        return None if self.allow_request(request) else math.ceil(self.wait())

    def record(self, request: HttpRequest) -> None:
        self.recording = True
        self.allow_request(request)

    def throttle_success(self) -> bool:
        # Only failures are counted: a check that lets a request through records nothing.
        return super().throttle_success() if self.recording else True


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
