"""Whole-page caching for the dashboard's heavy read pages (the run list, a run's trace, the metrics).

Rendering those pages costs tens of milliseconds at a million runs; serving one again costs one
cache round trip. An entry belongs to one user and one CSRF cookie (the HTML carries the user's
name, what their permissions allow and their CSRF token), one language, one URL and one htmx
target, plus whatever the view adds (a run's trace adds the run's state, so a new step shows at
once).

What moves with the clock alone (a live run's elapsed time, the scale of its waterfall) is not
stored: the page holds a ``placeholder`` there, and every response, from the cache or not, gets
the value of the moment (``cached(..., fill=...)``). So a live run's page is stored like any
other, however often its readers poll it.

Freshness: any change a person makes through the site (a POST, PUT, PATCH or DELETE) bumps one
version number that every entry is checked against, so one's own action shows at once; what the
workers write shows within ``PAGE_CACHE_SECONDS`` (the page of a run that ended a moment ago,
whose evaluation may still arrive: within ``RECENTLY_ENDED_PAGE_CACHE_SECONDS``). When an entry
has aged past that, one request renders the page again while the others are still served the
entry (stale by at most that one render), so a busy page never makes its readers queue behind a
render.
"""

import hashlib
import logging
import re
import time
from collections.abc import Callable, Mapping
from functools import wraps

from django.conf import settings
from django.contrib.messages.storage.cookie import CookieStorage
from django.contrib.messages.storage.session import SessionStorage
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse
from django.utils.html import conditional_escape
from django.utils.safestring import SafeString, mark_safe

logger = logging.getLogger(__name__)

VERSION_KEY = "page-cache:version"
# A run that ended a moment ago may still be waiting for its evaluation (its section polls every
# 2 s, and says "waiting" until ``views.evaluation.recently_ended`` turns false): entries of its
# page are at most this old.
RECENTLY_ENDED_PAGE_CACHE_SECONDS = 1
# How long an aged entry may still be served while one request renders its replacement.
STALE_GRACE_SECONDS = 30
# On a miss one request renders while the others asking for the same page wait for its result,
# rather than twenty clients rendering the same seconds-long page at once.
RENDER_LOCK_SECONDS = 30
WAIT_STEP_SECONDS = 0.02
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
PLACEHOLDER = re.compile(rb"\x00([\w-]+)\x00")

Render = Callable[[], HttpResponse]


def bump_version() -> None:
    """Invalidate every cached page (their version no longer matches)."""
    cache.add(VERSION_KEY, 0, timeout=None)
    try:
        cache.incr(VERSION_KEY)
    except ValueError:  # evicted between add and incr: any new value invalidates
        cache.set(VERSION_KEY, time.time_ns(), timeout=None)


def _pending_messages(request: HttpRequest) -> bool:
    # A cached page would not show (and so not consume) a message waiting for the next page.
    return bool(
        request.COOKIES.get(CookieStorage.cookie_name)
        or (hasattr(request, "session") and SessionStorage.session_key in request.session)
    )


def _key(request: HttpRequest, name: str, vary: tuple[object, ...]) -> str | None:
    csrf_cookie = request.COOKIES.get(settings.CSRF_COOKIE_NAME, "")
    if not csrf_cookie:
        # This render creates the browser's CSRF secret: its tokens are good for this browser only.
        return None
    parts = (
        name,
        str(request.user.pk),
        csrf_cookie,
        getattr(request, "LANGUAGE_CODE", ""),
        str(bool(getattr(request, "htmx", False))),
        request.headers.get("HX-Target", ""),
        request.get_full_path(),
        *map(repr, vary),
    )
    return "page-cache:" + hashlib.sha256("\x1f".join(parts).encode()).hexdigest()


# An entry: (version, fresh until (time.time()), content, headers).
Entry = tuple[int, float, bytes, dict[str, str]]


def _response(entry: Entry) -> HttpResponse:
    return HttpResponse(entry[2], headers=entry[3])


def _render_and_store(key: str, version: int, seconds: float, render: Render) -> HttpResponse:
    response = render()
    if response.status_code == 200 and not response.streaming and not response.cookies:
        entry = (version, time.time() + seconds, response.content, dict(response.headers))
        cache.set(key, entry, int(seconds) + STALE_GRACE_SECONDS)
    return response


def _wait_for_entry(key: str, lock: str, version: int) -> Entry | None:
    """The entry of ``version`` another request, holding ``lock``, stores under ``key``; None if
    it gave up without storing one, or took longer than RENDER_LOCK_SECONDS."""
    deadline = time.monotonic() + RENDER_LOCK_SECONDS
    while time.monotonic() < deadline:
        time.sleep(WAIT_STEP_SECONDS)
        entry = cache.get(key)
        if entry is not None and entry[0] == version:
            return entry
        if cache.get(lock) is None:
            return None  # the other request ended without storing (an error, say)
    return None


def placeholder(name: str) -> SafeString:
    """A stand-in for a value that moves with the clock, rendered into a page ``cached`` stores:
    every response gets the value of the moment instead (``cached(..., fill={name: value})``).

    Delimited by NUL characters: PostgreSQL text and jsonb cannot hold one, so no stored content
    (a task's text, a tool's result) can ever be taken for a placeholder."""
    return mark_safe(f"\x00{name}\x00")


def _fill(response: HttpResponse, fill: Mapping[str, str]) -> HttpResponse:
    if response.streaming or b"\x00" not in response.content:
        return response
    values = {name.encode(): str(conditional_escape(value)).encode() for name, value in fill.items()}

    def value_of(found: re.Match[bytes]) -> bytes:
        if found[1] not in values:
            # A view's mistake: shown as nothing, never as a NUL character in the page.
            logger.error("a cached page holds the placeholder %r and no value for it", found[1])
        return values.get(found[1], b"")

    response.content = PLACEHOLDER.sub(value_of, response.content)
    if "Content-Length" in response:
        response["Content-Length"] = str(len(response.content))
    return response


def cached(
    request: HttpRequest,
    name: str,
    render: Render,
    *,
    vary: tuple[object, ...] = (),
    seconds: float | None = None,
    fill: Mapping[str, str] | None = None,
) -> HttpResponse:
    """``render()``'s answer to this GET, from the cache when it has one fresh enough.

    ``name`` names the page; ``vary``: what else the page depends on that the URL does not say
    (each part by its repr); ``seconds``: how long an entry stays fresh (``PAGE_CACHE_SECONDS`` by
    default); ``fill``: the value of each ``placeholder(name)`` the page holds, put into every
    response, from the cache or not (HTML-escaped unless marked safe)."""
    return _fill(_cached(request, name, render, vary=vary, seconds=seconds), fill or {})


def _cached(
    request: HttpRequest, name: str, render: Render, *, vary: tuple[object, ...], seconds: float | None
) -> HttpResponse:
    seconds = settings.PAGE_CACHE_SECONDS if seconds is None else min(seconds, settings.PAGE_CACHE_SECONDS)
    if not seconds or request.method != "GET" or not request.user.is_authenticated:
        return render()
    key = _key(request, name, vary)
    if key is None or _pending_messages(request):
        return render()
    lock = f"{key}:rendering"
    # From this process's memory while Redis reports neither changed (agentsite/cache.py): a
    # page served again costs no transfer of its entry.
    found = cache.get_many([VERSION_KEY, key])
    version = found.get(VERSION_KEY, 0)
    entry: Entry | None = found.get(key)
    current = entry is not None and entry[0] == version
    if current and entry[1] > time.time():
        return _response(entry)
    if cache.add(lock, 1, timeout=RENDER_LOCK_SECONDS):
        try:
            return _render_and_store(key, version, seconds, render)
        finally:
            cache.delete(lock)
    if current:
        return _response(entry)  # aged, and another request is rendering it again meanwhile
    # Nothing to serve yet and another request is rendering this page: wait for its result.
    entry = _wait_for_entry(key, lock, version)
    return _response(entry) if entry is not None else render()


def cached_page(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """A view whose GET answers are served by ``cached`` (for pages the URL says all about)."""
    name = f"{view.__module__}.{view.__qualname__}"

    @wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        return cached(request, name, lambda: view(request, *args, **kwargs))

    return wrapper


class PageCacheMiddleware:
    """Bumps the page version after every request that may change data, so a person's own
    change is never hidden by a cached page."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if request.method in UNSAFE_METHODS and settings.PAGE_CACHE_SECONDS:
            bump_version()
        return response
