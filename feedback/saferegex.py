"""The one way a regular expression written by a person or a model is run: RE2.

Python's ``re`` backtracks: ``^(a+)+$`` against 28 characters held a worker, heartbeat included,
for 12.5 s, and each more character doubles it (issue 22). RE2 takes time linear in the text
whatever the pattern, at the price of what needs backtracking: backreferences (``\\1``),
lookaround (``(?=…)``, ``(?<!…)``), atomic groups and possessive repeats. A pattern with those is
refused where it is saved, with :func:`problem`'s message; one already stored matches nothing,
and says so once in the log (:func:`stored`).

Strategy conditions, guardrail parameter rules, layer-1 regex rules, the rule evaluator's
``format_regex``, expected answers written ``/…/``, and the ``pattern`` and ``patternProperties``
keywords of JSON Schemas (tool parameters, layer-1 ``json_schema`` rules, :func:`schema_validator`)
all come through here. The project's own fixed patterns stay on ``re``.

Differences from ``re`` a pattern's author may meet: ``\\d``, ``\\w`` and ``\\b`` are ASCII only;
``$`` matches at the very end only (not before a final newline); Python's ``\\Z`` is RE2's ``\\z``
(translated here).
"""

import logging
import re
from collections.abc import Iterator, Mapping
from functools import cache, lru_cache
from typing import Any

import jsonschema
import re2

logger = logging.getLogger(__name__)

# Longer patterns are refused: nobody writes a condition that long, and compiling is the one
# cost RE2 does not bound by the text.
MAX_PATTERN_CHARS = 1000
# RE2's memory for one compiled pattern and its matching cache (its default is 8 MiB); a pattern
# that needs more is refused as too large, and matching past it falls back to slower, still
# linear, matching.
MAX_MEMORY_BYTES = 2 << 20

Regex = Any  # re2's compiled pattern: search, fullmatch, finditer, like re.Pattern's
_SURROGATES = re.compile("[\ud800-\udfff]")
# Python's end of text \Z (not after another backslash) is \z in RE2.
_PYTHON_END = re.compile(r"(?<!\\)((?:\\\\)*)\\Z")


class PatternError(ValueError):
    """A pattern that cannot be run here; the message names it and says why (``reason``)."""

    def __init__(self, pattern: Any, reason: str) -> None:
        super().__init__(_sentence(pattern, reason))
        self.pattern, self.reason = pattern, reason


def _sentence(pattern: Any, reason: str) -> str:
    shown = pattern if not isinstance(pattern, str) or len(pattern) <= 80 else pattern[:80] + "…"
    return f"The regular expression {shown!r} cannot be used: {reason}."


def _why(pattern: str, error: str) -> str:
    """RE2's error in a reviewer's words."""
    if "(?P=" in pattern:
        return "a backreference to a named group ((?P=name)) needs backtracking"
    for marks, said in (
        (("(?=", "(?!"), "lookahead ((?=…), (?!…)) needs backtracking"),
        (("(?<=", "(?<!"), "lookbehind ((?<=…), (?<!…)) needs backtracking"),
        (("(?>", "++", "*+", "?+", "}+"), "atomic groups and possessive repeats are not supported"),
    ):
        if any(mark in error for mark in marks):
            return said
    if re.search(r"invalid escape sequence: \\[1-9]", error):
        return "a backreference (\\1 …) needs backtracking"
    if "repetition size" in error or "too large" in error or "too big" in error:
        return f"it is too large (repeats of at most 1000; RE2 says: {error})"
    return f"RE2 cannot run it ({error})"


@lru_cache(maxsize=1024)
def _compiled(pattern: str, ignore_case: bool, dot_all: bool) -> tuple[Regex | None, str]:
    """(the compiled pattern, "") or (None, why not); cached with the refusals too."""
    if len(pattern) > MAX_PATTERN_CHARS:
        return None, f"it is longer than {MAX_PATTERN_CHARS} characters"
    options = re2.Options()
    options.log_errors = False
    options.max_mem = MAX_MEMORY_BYTES
    options.case_sensitive = not ignore_case
    options.dot_nl = dot_all
    try:
        return re2.compile(_PYTHON_END.sub(r"\1\\z", pattern), options), ""
    except re2.error as exc:
        error = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
    except UnicodeEncodeError:
        return None, "it holds a lone surrogate character"
    try:
        re.compile(pattern)
    except (re.error, RecursionError, OverflowError) as exc:
        return None, f"it is not a valid regular expression ({exc})"
    return None, _why(pattern, error)


def _reason(pattern: Any, ignore_case: bool, dot_all: bool) -> tuple[Regex | None, str]:
    if not isinstance(pattern, str):
        return None, "it is not a string"
    return _compiled(pattern, ignore_case, dot_all)


def problem(pattern: Any, *, ignore_case: bool = False, dot_all: bool = False) -> str:
    """Why ``pattern`` cannot be run, in a sentence that names it; "" when it can."""
    reason = _reason(pattern, ignore_case, dot_all)[1]
    return _sentence(pattern, reason) if reason else ""


def compile(pattern: str, *, ignore_case: bool = False, dot_all: bool = False) -> Regex:
    """``pattern`` compiled by RE2; :class:`PatternError` when it cannot be run."""
    compiled, reason = _reason(pattern, ignore_case, dot_all)
    if compiled is None:
        raise PatternError(pattern, reason)
    return compiled


@lru_cache(maxsize=256)
def stored(pattern: str, *, ignore_case: bool = False, dot_all: bool = False, where: str = "") -> Regex | None:
    """A pattern saved before it was checked (or under older rules): compiled, or None, which its
    caller takes as "matches nothing"; logged once per process and pattern."""
    compiled, reason = _compiled(pattern, ignore_case, dot_all)
    if compiled is None:
        logger.warning("%s%s It matches nothing.", f"{where}: " if where else "", _sentence(pattern, reason))
    return compiled


def text(value: str) -> str:
    """``value`` as RE2 can read it: lone surrogates (from a JSON "\\ud800") cannot be UTF-8, and
    become U+FFFD, one character for one, so positions stay the same."""
    return value if value.isascii() else _SURROGATES.sub("\ufffd", value)


def search(pattern: str, value: str, **flags: bool) -> Any:
    return compile(pattern, **flags).search(text(value))


def fullmatch(pattern: str, value: str, **flags: bool) -> Any:
    return compile(pattern, **flags).fullmatch(text(value))


def finditer(pattern: str, value: str, **flags: bool) -> Iterator[Any]:
    return compile(pattern, **flags).finditer(text(value))


# --- JSON Schema ------------------------------------------------------------------------------
# jsonschema runs "pattern" and "patternProperties" with Python's re: its keyword functions for
# them (and for additionalProperties, which reads patternProperties) are replaced by these.
def _pattern(validator, pattern, instance, schema):
    if not validator.is_type(instance, "string"):
        return
    try:
        found = search(pattern, instance)
    except PatternError as exc:
        yield jsonschema.ValidationError(str(exc))
        return
    if found is None:
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


def _matching(patterns: Mapping, name: str) -> list[str]:
    out = []
    for pattern in patterns:
        compiled = stored(pattern, where="JSON Schema patternProperties") if isinstance(pattern, str) else None
        if compiled is not None and compiled.search(text(name)):
            out.append(pattern)
    return out


def _pattern_properties(validator, pattern_properties, instance, schema):
    if not validator.is_type(instance, "object"):
        return
    for pattern in pattern_properties:
        if why := problem(pattern):
            yield jsonschema.ValidationError(why)
    for name, value in instance.items():
        for pattern in _matching(pattern_properties, name):
            yield from validator.descend(value, pattern_properties[pattern], path=name, schema_path=pattern)


def _additional_properties(validator, additional, instance, schema):
    if not validator.is_type(instance, "object"):
        return
    properties, patterns = schema.get("properties", {}), schema.get("patternProperties", {})
    extras = [name for name in instance if name not in properties and not _matching(patterns, name)]
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        listed = ", ".join(repr(each) for each in sorted(extras))
        yield jsonschema.ValidationError(f"Additional properties are not allowed ({listed} unexpected)")


_KEYWORDS = {"pattern": _pattern, "patternProperties": _pattern_properties,
             "additionalProperties": _additional_properties}  # fmt: skip


@cache
def _safe_class(base: type) -> type:
    keywords = {k: f for k, f in _KEYWORDS.items() if k in base.VALIDATORS}
    return jsonschema.validators.extend(base, keywords)


def _keys(schema: Any) -> Iterator[str]:
    if isinstance(schema, dict):
        for key, value in schema.items():
            yield key
            yield from _keys(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _keys(value)


def schema_validator(schema: dict) -> Any:
    """A validator for ``schema`` whose patterns run on RE2. Raises ``jsonschema.SchemaError``
    for a schema that is not valid, or that jsonschema would still match with Python's re:
    unevaluatedProperties works out its properties from patternProperties itself."""
    base = jsonschema.validators.validator_for(schema)
    base.check_schema(schema)
    keys = set(_keys(schema))
    if {"unevaluatedProperties", "patternProperties"} <= keys:
        raise jsonschema.SchemaError("patternProperties beside unevaluatedProperties is not supported")
    return _safe_class(base)(schema)


def schema_problems(schema: Any) -> list[str]:
    """What keeps ``schema`` from being used (its patterns included), for the places it is saved."""
    try:
        schema_validator(schema)
    except jsonschema.SchemaError as exc:
        return [f"Invalid JSON Schema: {exc.message}"]
    return [why for why in map(problem, _patterns_in(schema)) if why]


def _patterns_in(schema: Any) -> Iterator[Any]:
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "pattern" and isinstance(value, str):
                yield value
            elif key == "patternProperties" and isinstance(value, dict):
                yield from value
            yield from _patterns_in(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _patterns_in(value)
