"""Strings a person can type into JSON but no database column takes: refused where they are saved.

A JSON text may write ``"\\u0000"`` (a NUL character) or ``"\\ud800"`` (half of a UTF-16 pair):
both decode to a Python string, PostgreSQL refuses both in jsonb and text, and the save ended in
a 500 (issue 22). SQLite takes them, so they are refused everywhere, the same way: the strategy
edit (form and service) and every JSON field people edit in the admin, which are
:class:`StorableJSONField`. Machine-written values are cleaned instead, never refused
(feedback/agent/recorder.py ``storable``).
"""

import json
from collections.abc import Iterator
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.db import models
from django.utils.translation import gettext as _


def _unstorable_char(c: str) -> bool:
    return c == "\x00" or "\ud800" <= c <= "\udfff"


def _shown(where: str) -> str:
    # The path itself may hold the character: written as its JSON escape, never as itself.
    return "".join(f"\\u{ord(c):04x}" if _unstorable_char(c) else c for c in where)


def _bad(text: str) -> str:
    if "\x00" in text:
        return _("a NUL character (\\u0000)")
    if not text.isascii() and any(map(_unstorable_char, text)):
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
            shown = _shown(where) or _("the value")
            problems.append(_("%(where)s holds %(what)s, which cannot be stored.") % {"where": shown, "what": what})
    return problems


def validate_storable_json(value: Any) -> None:
    """The validator of the JSON fields people edit."""
    problems = unstorable(value)
    if problems:
        raise ValidationError(problems, code="unstorable")


class StorableJSONFormField(forms.JSONField):
    """The admin's JSON text box: refuses what cannot be stored, and shows it again as typed."""

    default_validators = [validate_storable_json]

    def prepare_value(self, value: Any) -> Any:
        shown = super().prepare_value(value)
        # A refused value is shown again with its escapes: a lone surrogate cannot even be
        # written into the page (UTF-8 has none), and a NUL should not be.
        if isinstance(shown, str) and any(map(_unstorable_char, shown)):
            return json.dumps(value, cls=self.encoder)
        return shown


class StorableJSONField(models.JSONField):
    """A JSON column people edit (in the admin, or any model form): what PostgreSQL would refuse
    is a field error, not a 500."""

    default_validators = [validate_storable_json]

    def formfield(self, **kwargs: Any) -> forms.Field:
        return super().formfield(**{"form_class": StorableJSONFormField, **kwargs})

    def deconstruct(self) -> tuple:
        # The same column as JSONField's: migrations see a JSONField, and none was needed for it
        # (SQLite would otherwise rebuild each table to "change" the field).
        name, _path, args, kwargs = super().deconstruct()
        return name, "django.db.models.JSONField", args, kwargs
