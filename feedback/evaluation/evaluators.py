"""Layer 2 evaluators that need no model: rule-based and reference-based.

Each evaluator is a function ``(run, config) -> Verdict`` (or ``None`` when it does not apply,
e.g. a reference evaluator on a task without an expected answer). Raising ``EvaluatorError``
marks that one evaluation as failed; the chain keeps the other evaluators' scores.

Beside its score, a verdict may say whether the task was accomplished (``accomplished``: True,
False, or None for no opinion); the chain decides the run's outcome from these (chain.py).
"""

import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any

from feedback.models import Evaluation, Run

_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?")
_LABEL_SEPARATORS = re.compile(r"[,;\n|]+")


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
    return [float(m.replace(",", "")) for m in _NUMBER.findall(text)]


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
    """Share of the configured checks the final answer passes: keywords, length, format, and
    no refusal. Its verdict on the task is only ever negative (hard evidence: the run did not
    answer, or its answer gives up); the checks of form alone do not show a task done."""
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
    min_length = config.get("min_length")
    if min_length is not None:
        if not isinstance(min_length, int) or isinstance(min_length, bool):
            raise EvaluatorError(f"min_length must be an integer, not {min_length!r}")
        ok = len(output.strip()) >= min_length
        checks.append({"check": "min_length", "ok": ok, "message": f"at least {min_length} characters"})
    pattern = config.get("format_regex")
    if pattern:
        try:
            ok = re.fullmatch(pattern, output.strip(), re.DOTALL) is not None
        except re.error as exc:
            raise EvaluatorError(f"format_regex is not a valid regular expression: {exc}") from exc
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


# --- reference-based ------------------------------------------------------------------------
def choose_mode(expected: str) -> str:
    """How to compare with the expected answer, read off the expected answer itself."""
    stripped = expected.strip()
    if len(stripped) > 2 and stripped.startswith("/") and stripped.endswith("/"):
        return "regex"
    if len(numbers_in(stripped)) == 1 and _NUMBER.fullmatch(stripped.replace(" ", "")):
        return "numeric"
    if len([p for p in _LABEL_SEPARATORS.split(stripped) if p.strip()]) > 1:
        return "labels"
    return "normalised"


def _compare_numeric(expected: str, output: str, config: dict) -> tuple[float, str, dict]:
    target = numbers_in(expected)[0]
    tolerance = float(config.get("tolerance", 1e-6))
    found = numbers_in(output)
    # Any number in the answer may be the result; prose often restates the operands first.
    hit = next((n for n in found if abs(n - target) <= tolerance * max(1.0, abs(target))), None)
    if hit is not None:
        return 1.0, f"The answer contains {hit:g}, the expected {target:g}.", {"found": found}
    return 0.0, f"Expected {target:g}; the answer has {found or 'no numbers'}.", {"found": found}


def _compare_labels(expected: str, output: str, config: dict) -> tuple[float, str, dict]:
    wanted = {normalise(p) for p in _LABEL_SEPARATORS.split(expected) if p.strip()}
    said = normalise(output)
    present = {label for label in wanted if re.search(rf"(?<!\w){re.escape(label)}(?!\w)", said)}
    details: dict[str, Any] = {"expected": sorted(wanted), "found": sorted(present)}
    universe = {normalise(str(label)) for label in config.get("all_labels", [])}
    if universe:
        # With the full label set known, naming a wrong label costs precision too (F1).
        predicted = {label for label in universe | wanted if re.search(rf"(?<!\w){re.escape(label)}(?!\w)", said)}
        true_positive = len(predicted & wanted)
        precision = true_positive / len(predicted) if predicted else 0.0
        recall = true_positive / len(wanted)
        score = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        details.update(predicted=sorted(predicted), precision=precision, recall=recall)
    else:
        score = len(present) / len(wanted)
    missing = sorted(wanted - present)
    feedback = "Missing labels: " + ", ".join(missing) + "." if missing else "All expected labels present."
    return score, feedback, details


def _compare_regex(expected: str, output: str, config: dict) -> tuple[float, str, dict]:
    pattern = expected.strip()[1:-1] if expected.strip().startswith("/") else expected.strip()
    try:
        found = re.search(pattern, output, re.IGNORECASE | re.DOTALL)
    except re.error as exc:
        raise EvaluatorError(f"The expected-answer pattern is not a valid regular expression: {exc}") from exc
    if found:
        return 1.0, f"The answer matches /{pattern}/.", {"match": found.group(0)[:200]}
    return 0.0, f"The answer does not match /{pattern}/.", {}


def _compare_exact(expected: str, output: str, config: dict) -> tuple[float, str, dict]:
    ok = expected.strip() == output.strip()
    return float(ok), "Exactly the expected answer." if ok else "Not exactly the expected answer.", {}


def _compare_normalised(expected: str, output: str, config: dict) -> tuple[float, str, dict]:
    want, got = normalise(expected), normalise(output)
    if want == got:
        return 1.0, "The expected answer, up to case and punctuation.", {}
    if want and re.search(rf"(?<!\w){re.escape(want)}(?!\w)", got):
        return 1.0, "The answer contains the expected answer.", {}
    return 0.0, "The answer does not contain the expected answer.", {}


COMPARISONS = {
    "numeric": _compare_numeric,
    "labels": _compare_labels,
    "regex": _compare_regex,
    "exact": _compare_exact,
    "normalised": _compare_normalised,
}


def reference_evaluator(run: Run, config: dict) -> Verdict | None:
    """Compare the final answer with the task's expected answer; not applicable without one.
    Its verdict: accomplished when the answer matches fully (score 1: every expected label, the
    number, the pattern), not accomplished otherwise."""
    expected = run.task.expected_answer
    if not expected.strip():
        return None
    mode = config.get("mode", "auto")
    if mode == "auto":
        mode = choose_mode(expected)
    compare = COMPARISONS.get(mode)
    if compare is None:
        raise EvaluatorError(f"Unknown reference mode {mode!r}; use one of {', '.join(COMPARISONS)}.")
    score, feedback, details = compare(expected, run.final_output or "", config)
    return Verdict(score=score, feedback=feedback, details={"mode": mode, **details}, accomplished=score >= 1.0)


EVALUATOR_KINDS = {
    "rule": Evaluation.Kind.RULE,
    "reference": Evaluation.Kind.REFERENCE,
    "judge": Evaluation.Kind.JUDGE,
}
