"""Layer 1: immediate validation of a tool result, by rules only, in milliseconds.

The tool invoker calls :func:`validate` after every tool call with the rules configured for that
tool and records ``report.as_json()`` on the step. A hard failure sends the call to the retry or
error path at once; a soft one is only a warning in the trace.

Rules are dicts with a ``"type"``:

- ``{"type": "json_schema", "schema": {...}}``
- ``{"type": "range", "path": "current.temperature", "min": -50, "max": 50}``
- ``{"type": "regex", "path": "email", "pattern": "[^@]+@[^@]+"}`` (full match)

Regular expressions, the ``pattern`` keywords of JSON Schemas included, run on RE2
(feedback/saferegex.py): rules come from people, and a tool result is whatever the tool says.
- ``{"type": "required_keys", "keys": ["a", "b.c"]}``
- ``{"type": "http_status", "allowed": [200, 201], "path": "status"}``

Each may say ``"hard": false``. A rule that is itself broken (unknown type, bad regex, bad
schema) gives a failing check that says so: rules come from operators and strategies, and a typo
there must show up in the trace, not crash the invoker.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from feedback import saferegex

_MISSING = object()


@dataclass
class ValidationReport:
    status: str  # "pass" | "fail"
    checks: list[dict] = field(default_factory=list)
    # True when a hard failure looks transient (HTTP 5xx or 429): worth retrying the call.
    retryable: bool = False

    @property
    def hard_failure(self) -> bool:
        return any(not c["ok"] and c["hard"] for c in self.checks)

    def as_json(self) -> dict:
        return {"status": self.status, "checks": list(self.checks)}


class RuleError(Exception):
    """The rule itself is misconfigured."""


def lookup(data: Any, path: str) -> Any:
    """The value at a dotted key path (``"a.b.0.c"``; digits index lists), or ``_MISSING``."""
    if path in ("", None):
        return data
    current = data
    for part in str(path).split("."):
        if isinstance(current, dict) and part in current:
            current = current[part]
        elif isinstance(current, list) and part.lstrip("-").isdigit() and -len(current) <= int(part) < len(current):
            current = current[int(part)]
        else:
            return _MISSING
    return current


def _number(value: Any, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RuleError(f"'{name}' must be a number, not {value!r}")
    return float(value)


def _check_json_schema(rule: dict, result: Any) -> tuple[bool, str, bool]:
    schema = rule.get("schema")
    if not isinstance(schema, dict):
        raise RuleError("'schema' must be a JSON Schema object")
    try:
        validator = saferegex.schema_validator(schema)
    except jsonschema.SchemaError as exc:
        raise RuleError(f"invalid JSON Schema: {exc.message}") from exc
    errors = sorted(validator.iter_errors(result), key=lambda e: list(e.path))
    if not errors:
        return True, "matches the JSON Schema", False
    first = errors[0]
    where = "/".join(str(p) for p in first.path) or "(root)"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return False, f"{where}: {first.message}{more}", False


def _check_range(rule: dict, result: Any) -> tuple[bool, str, bool]:
    path = rule.get("path")
    if not isinstance(path, str) or not path:
        raise RuleError("'path' is required")
    low, high = _number(rule.get("min"), "min"), _number(rule.get("max"), "max")
    if low is None and high is None:
        raise RuleError("give 'min', 'max' or both")
    if low is not None and high is not None and low > high:
        raise RuleError(f"'min' {low} is greater than 'max' {high}")
    value = lookup(result, path)
    if value is _MISSING:
        return False, f"{path} is missing", False
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        return False, f"{path} is not a number: {value!r}", False
    if (low is not None and value < low) or (high is not None and value > high):
        return False, f"{path} = {value} is outside {low if low is not None else '-∞'}..{high}", False
    return True, f"{path} = {value} is within range", False


def _check_regex(rule: dict, result: Any) -> tuple[bool, str, bool]:
    path, pattern = rule.get("path", ""), rule.get("pattern")
    if not isinstance(pattern, str):
        raise RuleError("'pattern' must be a string")
    try:
        compiled = saferegex.compile(pattern)
    except saferegex.PatternError as exc:
        raise RuleError(f"invalid regular expression {pattern!r}: {exc.reason}") from exc
    value = lookup(result, path)
    label = path or "result"
    if value is _MISSING:
        return False, f"{label} is missing", False
    if not isinstance(value, str):
        return False, f"{label} is not a string", False
    if compiled.fullmatch(saferegex.text(value)):
        return True, f"{label} matches {pattern}", False
    return False, f"{label} does not match {pattern}", False


def _check_required_keys(rule: dict, result: Any) -> tuple[bool, str, bool]:
    keys = rule.get("keys")
    if not isinstance(keys, list) or not keys or not all(isinstance(k, str) and k for k in keys):
        raise RuleError("'keys' must be a non-empty list of key paths")
    missing = [k for k in keys if lookup(result, k) is _MISSING]
    if missing:
        return False, "missing keys: " + ", ".join(missing), False
    return True, "all required keys present", False


def _check_http_status(rule: dict, result: Any) -> tuple[bool, str, bool]:
    path = rule.get("path", "status")
    allowed = rule.get("allowed", [200])
    if not isinstance(allowed, list) or not allowed or not all(type(a) is int for a in allowed):
        raise RuleError("'allowed' must be a non-empty list of integer status codes")
    value = lookup(result, path)
    if value is _MISSING:
        return False, f"{path} is missing", False
    try:
        status = int(value)
    except (TypeError, ValueError):
        return False, f"{path} is not a status code: {value!r}", False
    if status in allowed:
        return True, f"HTTP {status}", False
    # Server errors and rate limits tend to go away; 4xx client errors would only repeat.
    retryable = status >= 500 or status == 429
    return False, f"HTTP {status} not in {allowed}", retryable


RULES: dict[str, Callable[[dict, Any], tuple[bool, str, bool]]] = {
    "json_schema": _check_json_schema,
    "range": _check_range,
    "regex": _check_regex,
    "required_keys": _check_required_keys,
    "http_status": _check_http_status,
}


def check_rules(rules: Any) -> list[str]:
    """What keeps a list of rules from being saved: not a list of objects, or a regular expression
    (of a regex rule, or in a JSON Schema) that cannot be run. Empty when fine."""
    if not isinstance(rules, list) or not all(isinstance(r, dict) for r in rules):
        return ["Expected a list of rules (objects)."]
    problems = []
    for i, rule in enumerate(rules, start=1):
        if rule.get("type") == "regex":
            found = [saferegex.problem(rule.get("pattern"))]
        elif rule.get("type") == "json_schema" and isinstance(rule.get("schema"), dict):
            found = saferegex.schema_problems(rule["schema"])
        else:
            continue
        problems += [f"Rule {i}: {why}" for why in found if why]
    return problems


def validate(rules: list[dict], result: Any) -> ValidationReport:
    """Check ``result`` against every rule; never raises, whatever the rules contain."""
    checks: list[dict] = []
    retryable = False
    if not isinstance(rules, list):
        rules = [rules]
    for rule in rules:
        kind = rule.get("type") if isinstance(rule, dict) else None
        hard = not (isinstance(rule, dict) and rule.get("hard") is False)
        check = RULES.get(kind) if isinstance(kind, str) else None
        if check is None:
            checks.append({"rule": str(kind), "ok": False, "hard": hard, "message": f"bad rule: unknown type {kind!r}"})
            continue
        try:
            ok, message, transient = check(rule, result)
        except RuleError as exc:
            ok, message, transient = False, f"bad rule: {exc}", False
        except Exception as exc:  # a rule must never take the invoker down with it
            ok, message, transient = False, f"bad rule: {type(exc).__name__}: {exc}", False
        checks.append({"rule": kind, "ok": ok, "message": message, "hard": hard})
        retryable = retryable or (transient and hard)
    failed_hard = any(not c["ok"] and c["hard"] for c in checks)
    return ValidationReport(status="fail" if failed_hard else "pass", checks=checks, retryable=retryable)
