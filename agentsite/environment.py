"""Environment variables, read typed: every one settings.py reads is declared with its type, its
default and what it accepts (a mode's choices, a number's bounds, a rate, a URL's schemes).

A value that is not one of those is never taken for something else (``LLM_TOOL_MODE=jsno`` used
to mean native tool calls, ``DEBUG=ture`` false, ``LLM_TIMEOUT_SECONDS=60s`` 60): it is recorded
as a problem naming the variable, its value and what it accepts, and the setting keeps its
default so the rest of the settings still load. The problems stop ``manage.py check`` (and
``migrate``, ``runserver``: every command that runs the system checks, feedback/checks.py), the
web server (agentsite/wsgi.py, asgi.py) and the worker and beat (agentsite/celery.py), all at
once, each with its message.

django-environ parses the URLs (databases, caches, mail servers); the scalar types are parsed
here, strictly, because django-environ's own are lenient on purpose (any unknown word is a false
boolean, and a float keeps only the digits of its text). An empty variable counts as unset,
except for free text, where empty is a value (``OPENAI_BASE_URL=``).
"""

from __future__ import annotations  # the readers are named after the types they read

import math
import os
import re
import zoneinfo
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, TypeVar

import environ
from django.core.exceptions import ImproperlyConfigured

T = TypeVar("T")

_TRUE = frozenset({"true", "1", "yes", "y", "on"})
_FALSE = frozenset({"false", "0", "no", "n", "off"})

# A request rate as ninja's throttles read it (ninja.throttling.SimpleRateThrottle.parse_rate, which
# cannot be imported while the settings load: ninja reads the settings when it is imported), less
# what it would take and misread ("5/0", "0/min"): tests/test_settings_typed.py holds the two together.
RATE_PERIODS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hour": 3600, "d": 86400, "day": 86400}
_RATE = re.compile(r"^([1-9]\d*)/(?:([1-9]\d*)?(" + "|".join(RATE_PERIODS) + r")|([1-9]\d*))$")
NO_LIMIT = ("", "0")
_URL_PASSWORD = re.compile(r"(://[^:/@\s]*:)[^@/\s]+@")


class BadValue(ValueError):
    """What a variable accepts, said to the person who set it."""


def parse_rate(text: str) -> tuple[int, int] | None:
    """``"300/min"``, ``"20/15min"``, ``"5/s"``: (requests, seconds), as ninja's throttles read it;
    ``"0"`` or ``""``: no limit (None). BadValue for anything else, a count or period of 0 included."""
    if text.strip() in NO_LIMIT:
        return None
    match = _RATE.match(text.strip())
    if match is None:
        units = ", ".join(RATE_PERIODS)
        raise BadValue(f'N/period, e.g. "300/min" or "20/15min" (period {units}, or seconds), or 0 for no limit')
    count, multiple, unit, seconds = match.groups()
    if seconds is not None:
        return int(count), int(seconds)
    return int(count), int(multiple or 1) * RATE_PERIODS[unit]


class Environment:
    """Typed reads of ``environ`` (the process's environment), collecting ``problems``."""

    def __init__(self, environ: Mapping[str, str] = os.environ) -> None:
        self._environ = environ
        self.problems: list[str] = []

    def _read(self, var: str, default: T, parse: Callable[[str], T], *, empty_is_unset: bool = True) -> T:
        raw = self._environ.get(var)
        if raw is None or (empty_is_unset and not raw.strip()):
            return default
        try:
            return parse(raw)
        except BadValue as accepts:
            self.problems.append(f"{var}={_shown(raw)!r} is not valid: {var} is {accepts}.")
            return default

    def require(self, condition: bool, problem: str) -> None:
        """A rule between settings (each valid alone): ``problem`` says what to change."""
        if not condition:
            self.problems.append(problem)

    def str(self, var: str, *, default: str, choices: Sequence[str] | None = None) -> str:
        """Free text, or with ``choices`` a mode: one of them, exactly."""
        if choices is None:
            return self._read(var, default, lambda raw: raw, empty_is_unset=False)

        def choice(raw: str) -> str:
            if raw.strip() not in choices:
                raise BadValue("one of " + ", ".join(choices))
            return raw.strip()

        return self._read(var, default, choice)

    def bool(self, var: str, *, default: bool) -> bool:
        def switch(raw: str) -> bool:
            word = raw.strip().lower()
            if word not in _TRUE | _FALSE:
                raise BadValue("true or false (or 1/0, yes/no, on/off)")
            return word in _TRUE

        return self._read(var, default, switch)

    def int(self, var: str, *, default: int, ge: int | None = None, le: int | None = None) -> int:
        def whole(raw: str) -> int:
            try:
                value = int(raw.strip())
            except ValueError:
                value = None
            if value is None or not _within(value, ge, le):
                raise BadValue("a whole number" + _bounds(ge, le))
            return value

        return self._read(var, default, whole)

    def float(
        self,
        var: str,
        *,
        default: float | None,
        ge: float | None = None,
        le: float | None = None,
        gt: float | None = None,
    ) -> float | None:
        def number(raw: str) -> float:
            try:
                value = float(raw.strip())
            except ValueError:
                value = math.nan
            if not math.isfinite(value) or not _within(value, ge, le) or (gt is not None and value <= gt):
                raise BadValue("a number" + (f" above {gt:g}" if gt is not None else "") + _bounds(ge, le))
            return value

        return self._read(var, default, number)

    def list(self, var: str, *, default: list[str], length: int | None = None) -> list[str]:
        """Comma-separated; with ``length``, exactly that many items (or none)."""

        def items(raw: str) -> list[str]:
            values = [item.strip() for item in raw.split(",") if item.strip()]
            if length is not None and len(values) not in (0, length):
                raise BadValue(f"{length} comma-separated values")
            return values

        return self._read(var, default, items)

    def rate(self, var: str, *, default: str) -> str:
        """A request rate as ninja's throttles read it (``parse_rate``), kept as its text."""

        def rate(raw: str) -> str:
            parse_rate(raw)
            return raw.strip()

        return self._read(var, default, rate)

    def url(self, var: str, *, default: str, schemes: Collection[str]) -> str:
        """A URL of one of ``schemes`` (``"redis"`` also takes ``redis+socket://``; several URLs
        separated by ``;`` are failover URLs, as Celery takes them)."""

        def url(raw: str) -> str:
            for one in raw.strip().split(";"):
                scheme, sep, _rest = one.strip().partition("://")
                if not sep or scheme.split("+")[0].lower() not in schemes:
                    raise BadValue("a URL starting with " + ", ".join(f"{s}://" for s in sorted(schemes)))
            return raw.strip()

        return self._read(var, default, url)

    def db(self, var: str, *, default: str) -> dict[str, Any]:
        parse = _parsed(environ.Env.db_url_config, environ.Env.DB_SCHEMES)
        return self._read(var, environ.Env.db_url_config(default), parse)

    def cache(self, var: str, *, default: str) -> dict[str, Any]:
        parse = _parsed(environ.Env.cache_url_config, environ.Env.CACHE_SCHEMES)
        return self._read(var, environ.Env.cache_url_config(default), parse)

    def email(self, var: str) -> dict[str, Any]:
        """The mail server's settings (EMAIL_BACKEND, EMAIL_HOST...) of a mail URL; {} when unset."""
        return self._read(var, {}, _parsed(environ.Env.email_url_config, environ.Env.EMAIL_SCHEMES))

    def time_zone(self, var: str, *, default: str) -> str:
        def zone(raw: str) -> str:
            try:
                zoneinfo.ZoneInfo(raw.strip())
            except (zoneinfo.ZoneInfoNotFoundError, ValueError):
                raise BadValue("a time zone name, e.g. UTC or Europe/Paris") from None
            return raw.strip()

        return self._read(var, default, zone)


def _shown(raw: str) -> str:
    """``raw`` as a problem may show it, in logs too: a URL's password masked."""
    return _URL_PASSWORD.sub(r"\1***@", raw)


def _within(value: float, ge: float | None, le: float | None) -> bool:
    return (ge is None or value >= ge) and (le is None or value <= le)


def _bounds(ge: float | None, le: float | None) -> str:
    if ge is not None and le is not None:
        return f" from {ge:g} to {le:g}"
    if ge is not None:
        return f" of at least {ge:g}"
    return f" of at most {le:g}" if le is not None else ""


def _parsed(config: Callable[[str], dict], schemes: Mapping[str, Any]) -> Callable[[str], dict]:
    """django-environ's parser of a kind of URL, refusing the schemes it does not know."""

    def parse(raw: str) -> dict:
        scheme = raw.strip().partition("://")[0]
        try:
            if scheme not in schemes:
                raise ValueError(scheme)
            return config(raw.strip())
        except (ValueError, KeyError, ImproperlyConfigured):
            raise BadValue("a URL starting with " + ", ".join(f"{s}://" for s in sorted(schemes))) from None

    return parse


def refuse_to_start(problems: Sequence[str]) -> None:
    """For the processes that run no system check (gunicorn, Celery): stop with the problems."""
    if problems:
        raise ImproperlyConfigured("The environment is not valid:\n" + "\n".join(f"- {p}" for p in problems))
