"""Conditional responses: a page or a part whose state has not changed since the browser last got
it is answered 304 Not Modified, without being rendered.

The ETag is a digest of the URL, of the state the view read (a run's, say: ``selectors.run_state``)
and of what makes the same state look different to each reader: who they are, what their permissions allow,
their language, their CSRF secret (the page embeds a token for it) and whether htmx asked (the run
list answers its table alone then). ``Cache-Control: private, no-cache``: the browser keeps the
answer for this reader only and asks again every time, so nothing is ever shown stale, and nothing
is shared. A page with a message waiting (django.contrib.messages) is rendered and sent without an
ETag: the message shows once, and the next answer is not a 304 of the page that showed it.
"""

import hashlib
import time
from collections.abc import Callable

from django.contrib.messages import get_messages
from django.http import HttpRequest, HttpResponse
from django.utils.cache import get_conditional_response, patch_cache_control, patch_vary_headers
from django.utils.http import quote_etag

# The server's clock (ms since the epoch) at each answer, 304s included: static/js/live.js sets a
# live run's clock by it, whatever the reader's own clock says.
SERVER_TIME_HEADER = "X-Server-Time"


def _reader(request: HttpRequest) -> tuple:
    user = request.user
    return (
        user.pk,
        user.get_username(),
        user.is_superuser,
        # Read once per request for the access check before: no query of its own.
        tuple(sorted(user.get_all_permissions())),
        getattr(request, "LANGUAGE_CODE", ""),
        # The secret the page's CSRF tokens are made from (cookie or session), not a token: each
        # render masks it afresh, and any of them is good for the same secret.
        request.META.get("CSRF_COOKIE", ""),
        bool(getattr(request, "htmx", False)),
    )


def _etag(request: HttpRequest, state: object) -> str:
    digest = hashlib.blake2b(repr((request.get_full_path(), state, _reader(request))).encode(), digest_size=16)
    return quote_etag(digest.hexdigest())


def answer(request: HttpRequest, state: object, render: Callable[[], HttpResponse]) -> HttpResponse:
    """``render()``'s response, or a 304 when the browser holds the one of this ``state`` (each
    part of it by its repr) for this reader."""
    tag = None if len(get_messages(request)) else _etag(request, state)
    response = get_conditional_response(request, etag=tag) if tag else None
    if response is None:
        response = render()
    if tag and response.status_code in (200, 304):
        response.headers["ETag"] = tag
    patch_cache_control(response, private=True, no_cache=True)
    patch_vary_headers(response, ["HX-Request"])
    response.headers[SERVER_TIME_HEADER] = str(int(time.time() * 1000))
    return response
