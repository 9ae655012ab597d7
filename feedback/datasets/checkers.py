"""Checkers: does a run's final answer match a dataset item's expected value? Strict, rule-based,
no model: what outcomes and experiments are measured against."""

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from django.utils.translation import gettext as _

from feedback import saferegex
from feedback.evaluation.evaluators import list_markers

# A number in prose: 1,234.5 / -3 / 2.5e3 / 12% (thousands separators dropped).
_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?")
_WORD = re.compile(r"[\w-]+")


@dataclass(frozen=True)
class CheckResult:
    passed: bool
    detail: str


def numbers_in(answer: str) -> list[float]:
    """The figures of ``answer``, without its list items' numbers ("1. List the files")."""
    found, markers = [], list_markers(answer)
    for match in _NUMBER.finditer(answer):
        if match.start() in markers:
            continue
        try:
            found.append(float(match.group().replace(",", "")))
        except ValueError:
            continue
    return found


def _numeric(expected: Any, answer: str, options: dict) -> CheckResult:
    target = float(expected)
    tolerance = float(options.get("tolerance", 0) or 0)
    relative = bool(options.get("relative", False))
    numbers = numbers_in(answer)
    if not numbers:
        return CheckResult(False, _("No number in the answer."))
    # The answer's last figure is its result ("3 + 4 = 7"); any figure matching counts only
    # with "any": true, as an answer listing several figures may merely mention the target.
    candidates = numbers if options.get("any") else numbers[-1:]
    allowed = tolerance * abs(target) if relative else tolerance
    for value in candidates:
        if math.isclose(value, target, abs_tol=max(allowed, 1e-9)):
            return CheckResult(True, _("%(value)s matches %(target)s.") % {"value": value, "target": target})
    return CheckResult(False, _("%(value)s is not %(target)s.") % {"value": candidates[-1], "target": target})


def _labels(expected: Any, answer: str, options: dict) -> CheckResult:
    case = bool(options.get("case", False))
    fold = (lambda s: s) if case else str.lower
    words = {fold(w) for w in _WORD.findall(answer)}
    wanted = [expected] if isinstance(expected, str) else list(expected)
    found = [label for label in wanted if fold(label) in words]
    if options.get("mode", "all" if isinstance(expected, list) else "one") == "one":
        passed = bool(found)
    else:
        passed = len(found) == len(wanted)
    # "forbidden": labels that must not appear, so naming every candidate is not a pass (a triage
    # that flags every email as urgent names the urgent ones too).
    named = [label for label in options.get("forbidden", []) if fold(label) in words]
    if named:
        return CheckResult(False, _("Should not name: %(named)s.") % {"named": ", ".join(named)})
    return CheckResult(passed, _("Labels found: %(found)s.") % {"found": ", ".join(found) or "-"})


def _contains(expected: Any, answer: str, options: dict) -> CheckResult:
    wanted = [expected] if isinstance(expected, str) else list(expected)
    case = bool(options.get("case", False))
    text = answer if case else answer.lower()
    missing = [w for w in wanted if (w if case else w.lower()) not in text]
    if missing:
        return CheckResult(False, _("Missing: %(missing)s.") % {"missing": ", ".join(missing)})
    return CheckResult(True, _("Contains every expected text."))


def _regex(expected: Any, answer: str, options: dict) -> CheckResult:
    ignore_case = not options.get("case", False)
    match = saferegex.search(expected, answer, ignore_case=ignore_case)
    return CheckResult(bool(match), _("Matches.") if match else _("Does not match."))


def _json_schema(expected: Any, answer: str, options: dict) -> CheckResult:
    text = answer.strip()
    # A model often fences its JSON in ```json ... ```.
    fenced = re.search(r"```(?:json)?\s*(.*?)```", text, re.S)
    if fenced:
        text = fenced.group(1).strip()
    try:
        value = json.loads(text)
    except ValueError:
        return CheckResult(False, _("The answer is not JSON."))
    errors = sorted(saferegex.schema_validator(expected).iter_errors(value), key=str)
    if errors:
        return CheckResult(False, errors[0].message)
    return CheckResult(True, _("Valid against the schema."))


_CHECKERS = {
    "numeric": _numeric,
    "labels": _labels,
    "contains": _contains,
    "regex": _regex,
    "json_schema": _json_schema,
}


def options_problems(checker: str, expected: Any, options: Any) -> list[str]:
    """Why an item's checker, expected value and options cannot be used ([] when they can):
    refused where items are saved, so a check never fails on its own configuration."""
    if checker not in _CHECKERS:
        return [_("Unknown checker %(checker)r.") % {"checker": checker}]
    if not isinstance(options, dict):
        return [_("Checker options must be an object.")]
    if checker == "numeric":
        try:
            float(expected)
            if float(options.get("tolerance", 0) or 0) < 0:
                return [_("The tolerance cannot be negative.")]
        except (TypeError, ValueError):
            return [_("A numeric checker needs a number as expected value and as tolerance.")]
    elif checker in ("labels", "contains"):
        items = [expected] if isinstance(expected, str) else expected
        if not isinstance(items, list) or not items or not all(isinstance(i, str) and i for i in items):
            return [_("Expected must be a text or a list of texts.")]
        forbidden = options.get("forbidden", [])
        if checker == "labels" and (
            not isinstance(forbidden, list) or not all(isinstance(i, str) and i for i in forbidden)
        ):
            return [_("Forbidden labels must be a list of texts.")]
    elif checker == "regex":
        if not isinstance(expected, str):
            return [_("Expected must be a regular expression.")]
        why = saferegex.problem(expected)
        return [why] if why else []
    elif checker == "json_schema":
        if not isinstance(expected, dict):
            return [_("Expected must be a JSON Schema object.")]
        return saferegex.schema_problems(expected)
    return []


def check(item: Any, answer: str) -> CheckResult:
    """``answer`` checked against ``item``'s expected value by its checker."""
    problems = options_problems(item.checker, item.expected, item.checker_options)
    if problems:
        return CheckResult(False, problems[0])
    return _CHECKERS[item.checker](item.expected, answer or "", item.checker_options or {})


def checker_verdict(run: Any) -> CheckResult | None:
    """The checker's verdict on ``run``'s final answer; None without a dataset item or an answer."""
    if run.dataset_item_id is None or not run.final_output:
        return None
    return check(run.dataset_item, run.final_output)
