"""http_get: read a URL on an allow-listed host. Redirects are followed only within the list."""

import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings

from .base import ToolContext, ToolError

MAX_BYTES = 100_000


def _check(url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ToolError(f"Only http and https URLs are allowed, not {parts.scheme or 'none'!r}.")
    host = (parts.hostname or "").lower()
    allowed = [h.lower() for h in settings.HTTP_GET_ALLOWED_HOSTS]
    if host not in allowed:
        raise ToolError(
            f"The host {host!r} is not on the allow-list ({', '.join(allowed) or 'empty'}); "
            "an operator can add it with HTTP_GET_ALLOWED_HOSTS."
        )


class _AllowListRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        _check(newurl)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


_opener = urllib.request.build_opener(_AllowListRedirects)


def http_get(ctx: ToolContext, url: str) -> dict[str, Any]:
    _check(url)
    request = urllib.request.Request(url, headers={"User-Agent": "agent-feedback/1"})
    try:
        with _opener.open(request, timeout=10) as response:
            body = response.read(MAX_BYTES + 1)
            status = response.status
            content_type = response.headers.get("Content-Type", "")
    except urllib.error.HTTPError as exc:
        if exc.code == 429 or exc.code >= 500:
            raise ToolError(f"HTTP {exc.code} from {url}", retryable=True) from exc
        return {"url": url, "status": exc.code, "content_type": "", "text": "", "truncated": False}
    except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ToolError(f"Could not reach {url}: {reason}", retryable=True) from exc
    return {
        "url": url,
        "status": status,
        "content_type": content_type,
        "text": body[:MAX_BYTES].decode("utf-8", errors="replace"),
        "truncated": len(body) > MAX_BYTES,
    }


HTTP_GET = {
    "type": "object",
    "properties": {"url": {"type": "string", "description": "An http(s) URL.", "minLength": 8, "maxLength": 2000}},
    "required": ["url"],
    "additionalProperties": False,
}
