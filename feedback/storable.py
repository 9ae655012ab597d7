"""Strings a person can type into JSON but no database column takes: refused where they are saved.

A JSON text may write ``"\\u0000"`` (a NUL character) or ``"\\ud800"`` (half of a UTF-16 pair):
both decode to a Python string, PostgreSQL refuses both in jsonb and text, and the save ended in
a 500 (issue 22). SQLite takes them, so they are refused everywhere, the same way: the strategy
edit (form and service) and every JSON field people edit in the admin (the model fields carry
:func:`validate_storable_json`). Machine-written values are cleaned instead, never refused
(feedback/agent/recorder.py ``storable``).
"""

from collections.abc import Iterator
from typing import Any

from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _


def _bad(text: str) -> str:
    if "\x00" in text:
        return _("a NUL character (\\u0000)")
    if not text.isascii() and any("\ud800" <= c <= "\udfff" for c in text):
        return _("a lone surrogate (\\ud800–\\udfff)")
    return ""


def _strings(value: Any, where: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, dict):
        for key, item in value.items():
            inner = f"{where}.{key}" if where else str(key)
            yield inner, str(key)
            yield from _strings(item, inner)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from _strings(item, f"{where}[{i}]")


def unstorable(value: Any, *, name: str = "") -> list[str]:
    """What in ``value`` (a string, or JSON: every key and string inside it) cannot be stored,
    one sentence per place, named by its path under ``name``; empty when all of it can."""
    problems = []
    for where, text in _strings(value, name):
        if what := _bad(text):
            shown = where.encode("ascii", "backslashreplace").decode() or _("the value")
            problems.append(_("%(where)s holds %(what)s, which cannot be stored.") % {"where": shown, "what": what})
    return problems


def validate_storable_json(value: Any) -> None:
    """The validator of the JSON fields people edit."""
    problems = unstorable(value)
    if problems:
        raise ValidationError(problems, code="unstorable")
