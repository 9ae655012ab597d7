"""Layer 2 evaluators that need no model: what every evaluator shares, and the rule-based one.

Each evaluator is a function ``(run, config) -> Verdict`` (or ``None`` when it does not apply,
e.g. a reference evaluator on a task without an expected answer). Raising ``EvaluatorError``
marks that one evaluation as failed; the chain keeps the other evaluators' scores. The reference
evaluator is in reference.py, the judge in judge.py.

Beside its score, a verdict may say whether the task was accomplished (``accomplished``: True,
False, or None for no opinion); the chain decides the run's outcome from these (chain.py).
"""

import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any

from feedback import saferegex
from feedback.models import Evaluation, Run

# Public: the reference evaluator finds the numbers of an answer with it too (reference.py).
NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?")
# A list item's number ("1. List the files", "- 2) Read each one"): at the start of a line, with a
# period or a bracket and the item's text after it on that line. It numbers the list, it is no
# figure the answer states: a plan narrated in numbered steps is not a count of 4 (issue 25).
LIST_MARKER = re.compile(r"(?m)^[ \t]*(?:[-*•][ \t]*)?(\d{1,3})[.)][ \t]+\S")


def list_markers(text: str) -> set[int]:
    """Where the list items' numbers of ``text`` start."""
    return {match.start(1) for match in LIST_MARKER.finditer(text)}


@dataclass
class Verdict:
    score: float
    feedback: str
    details: dict[str, Any] = field(default_factory=dict)
    # Whether the task was accomplished, in this evaluator's view; None: it cannot tell.
    accomplished: bool | None = None


class EvaluatorError(Exception):
    """The evaluator could not give a score (bad reply, timeout, bad configuration)."""

    def __init__(self, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.details = details or {}


def normalise(text: str) -> str:
    """Case-folded, accents and punctuation dropped, whitespace collapsed."""
    text = unicodedata.normalize("NFKC", text).casefold()
    text = re.sub(r"[^\w\s.-]", " ", text)
    text = re.sub(r"(?<!\d)\.|\.(?!\d)", " ", text)  # keep decimal points, drop full stops
    return " ".join(text.split())


def numbers_in(text: str) -> list[float]:
    return [float(m.replace(",", "")) for m in NUMBER.findall(text)]


# --- refusals ---------------------------------------------------------------------------------
# An answer that gives up rather than answers: the agent speaking of itself ("I could not find
# release-notes.txt", "I'm unable to", "I don't know"), or opening with a failure ("Could not
# find…", "Unable to…", "Sorry…"). The first person singular or the answer's opening only: a
# summary that quotes "the team could not find a venue" or "we cannot log in" is not a refusal,
# and "I found no urgent email" is an answer.
_REFUSALS = [
    re.compile(
        r"\bi\s+(?:really\s+|simply\s+|still\s+)?(?:could\s+not|couldn't|cannot|can\s+not|can't|"
        r"was\s+(?:not\s+able|unable)\s+to|do\s+not\s+know|don't\s+know|failed\s+to|have\s+no\s+way\s+to)\b",
        re.IGNORECASE,
    ),
    re.compile(r"\b(?:i'm|i\s+am)\s+(?:not\s+able|unable)\s+to\b|\b(?:i'm|i\s+am)\s+sorry\b", re.IGNORECASE),
    re.compile(
        r"^\W*(?:sorry|could\s+not|couldn't|cannot|can't|unable\s+to|failed\s+to|no\s+such\s+file|not\s+found)\b",
        re.IGNORECASE,
    ),
]


def refusal_in(text: str) -> str:
    """The words of ``text`` that give up on the task (a refusal, "could not find", "I don't
    know"), or "" when it has none."""
    # Typographic apostrophes count as plain ones: models write "I couldn’t" too.
    text = (text or "").replace("’", "'")
    for pattern in _REFUSALS:
        found = pattern.search(text)
        if found:
            return found.group(0).strip()
    return ""


# --- rule-based -----------------------------------------------------------------------------
def rule_evaluator(run: Run, config: dict) -> Verdict:
    """Share of the configured checks the final answer passes: keywords (all of ``keywords``, one
    of ``any_keywords``), length, format, and no refusal. Its verdict on the task is only ever
    negative (hard evidence: the run did not answer, or its answer gives up); the checks of form
    alone do not show a task done."""
    output = run.final_output or ""
    checks: list[dict[str, Any]] = []
    if run.status != Run.Status.SUCCEEDED:
        checks.append({"check": "succeeded", "ok": False, "message": f"the run ended {run.status}"})
    refusal = refusal_in(output)
    if refusal:
        checks.append({"check": "no_refusal", "ok": False, "message": f"gives up (“{refusal}”)"})
    for keyword in config.get("keywords", []):
        ok = normalise(str(keyword)) in normalise(output)
        checks.append({"check": "keyword", "ok": ok, "message": f"mentions “{keyword}”"})
    # One of several words: what every right answer has in common (a triage answer speaks of the
    # emails or of their urgency) where no single word is in all of them ("None are urgent").
    any_keywords = config.get("any_keywords")
    if any_keywords:
        if not isinstance(any_keywords, list) or not all(isinstance(k, str) and k.strip() for k in any_keywords):
            raise EvaluatorError(f"any_keywords must be a list of words, not {any_keywords!r}")
        ok = any(normalise(k) in normalise(output) for k in any_keywords)
        words = ", ".join(f"“{k}”" for k in any_keywords)
        checks.append({"check": "any_keyword", "ok": ok, "message": f"mentions one of {words}"})
    min_length = config.get("min_length")
    if min_length is not None:
        if not isinstance(min_length, int) or isinstance(min_length, bool):
            raise EvaluatorError(f"min_length must be an integer, not {min_length!r}")
        ok = len(output.strip()) >= min_length
        checks.append({"check": "min_length", "ok": ok, "message": f"at least {min_length} characters"})
    pattern = config.get("format_regex")
    if pattern:
        try:
            ok = saferegex.fullmatch(pattern, output.strip(), dot_all=True) is not None
        except saferegex.PatternError as exc:
            raise EvaluatorError(f"format_regex: {exc}") from exc
        checks.append({"check": "format_regex", "ok": ok, "message": f"matches {pattern}"})
    if not checks:
        checks.append({"check": "non_empty", "ok": bool(output.strip()), "message": "gives an answer"})
    passed = sum(c["ok"] for c in checks)
    failed = [c["message"] for c in checks if not c["ok"]]
    feedback = "All checks passed." if not failed else "Failed: " + "; ".join(failed) + "."
    gave_up = run.status != Run.Status.SUCCEEDED or bool(refusal)
    return Verdict(
        score=passed / len(checks),
        feedback=feedback,
        details={"checks": checks},
        accomplished=False if gave_up else None,
    )


EVALUATOR_KINDS = {
    "rule": Evaluation.Kind.RULE,
    "reference": Evaluation.Kind.REFERENCE,
    "judge": Evaluation.Kind.JUDGE,
}
