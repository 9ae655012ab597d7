"""The reference evaluator: the final answer against the task's expected answer, in a mode read off
it (``choose_mode``). Only what the answer asserts counts, not what it echoes, negates or hedges."""

import re
from typing import Any

from feedback import saferegex
from feedback.models import Run

from .evaluators import NUMBER, EvaluatorError, Verdict, list_markers, normalise, numbers_in
from .reading import Reading, Said, unsaid

_LABEL_SEPARATORS = re.compile(r"[,;\n|]+")

# What kind of shortfall a verdict below 1 is (``details["shortfall"]``): a few fixed phrases,
# where the feedback names this answer's own labels and numbers. Mining groups the reference's
# verdicts by it (strategies/mining.py): the feedback's words differ from item to item.
ECHO_FEEDBACK = "The answer only echoes the task."
ECHOES = "only echoes the task"
OVERREACH = "names labels it should not"


def expected_labels(expected: str) -> list[str]:
    """The labels an expected answer lists (comma, semicolon, bar or line separated)."""
    return [part.strip() for part in _LABEL_SEPARATORS.split(expected.strip()) if part.strip()]


def choose_mode(expected: str) -> str:
    """How to compare with the expected answer, read off the expected answer itself."""
    stripped = expected.strip()
    if len(stripped) > 2 and stripped.startswith("/") and stripped.endswith("/"):
        return "regex"
    if len(numbers_in(stripped)) == 1 and NUMBER.fullmatch(stripped.replace(" ", "")):
        return "numeric"
    if len(expected_labels(stripped)) > 1:
        return "labels"
    return "normalised"


# The number an answer concludes (the numeric mode).
# Words that state the result ("the answer is 79", "**Answer:** 79") outrank an equals sign, which
# also ends every intermediate step of a worked answer.
_LEAD = r"[\s*_`]*(?:(?:approximately|about|roughly|exactly|around|~)[\s*_`]*)?$"
_STATED = re.compile(
    r"\b(?:final\s+)?(?:answer|result|total|sum|product|difference|quotient|value|solution)"
    r"(?:\s*(?:is|was|will\s+be|would\s+be|equals|:|=))*" + _LEAD
)
_EQUALS = re.compile(r"(?:=|≈|\bequals|\bequal\s+to|\bcomes\s+to)" + _LEAD)
# "= 80 - 1" starts an expression; "**79**" is emphasis, not a power.
_OPERATOR_AFTER = re.compile(r"[ \t]*(?:[-+/×÷^−]|\*(?!\*))")
# What may stand between numbers offered as alternatives: "77, 78, 79 or 80", "79? 80?", "78. Or 79".
_HEDGES = r"or|and|maybe|perhaps|possibly|probably|either"
_ALTERNATIVE_GAP = re.compile(rf"(?:[\s,;/|?…]|\b(?:{_HEDGES})\b|\.(?=\s*(?:{_HEDGES})\b))*")
# Equations after "check:" verify the result ("= 79, check: 79 * 5 = 395"): they conclude nothing.
_CHECKING = re.compile(r"\b(?:check|checking|verify|verifying|verification|proof)\b")


def _contradictions(config: dict) -> dict[str, set[str]]:
    """Each label's contradicting labels, both ways round: ``{"urgent": ["low priority"]}`` also
    makes "urgent" contradict "low priority" (but not the listed labels one another)."""
    table = config.get("contradictions") or {}
    if not isinstance(table, dict) or not all(
        isinstance(others, list) and all(isinstance(o, str) for o in others) for others in table.values()
    ):
        raise EvaluatorError(f"contradictions must map a label to a list of labels, not {table!r}")
    opposed: dict[str, set[str]] = {}
    for label, others in table.items():
        for other in others:
            a, b = normalise(str(label)), normalise(other)
            if a and b and a != b:
                opposed.setdefault(a, set()).add(b)
                opposed.setdefault(b, set()).add(a)
    return opposed


def _rivals(label: str, reading: Reading, opposed: dict[str, set[str]], wanted: set[str]) -> list[str]:
    """The labels contradicting ``label`` that the answer asserts (expected ones excepted)."""
    return [c for c in sorted(opposed.get(label, ())) if c not in wanted and reading.said(c).how == "asserted"]


def _contradicted(label: str, said: Said, rivals: list[str]) -> list[str]:
    # "not urgent" as a rival of a negated "urgent" is that negation again: named once.
    again = re.compile(rf"(?<!\w){re.escape(label)}(?!\w)")
    return [f"“{c}” contradicts “{label}”" for c in rivals if not (said.how == "negated" and again.search(c))]


def _listed(values: list[str]) -> str:
    return values[0] if len(values) == 1 else ", ".join(values[:-1]) + " and " + values[-1]


def _compare_numeric(expected: str, output: str, config: dict, task: str = "") -> tuple[float, str, dict]:
    """The number the answer asserts: the one it concludes ("the answer is 79", the last "= 79"),
    else any number of its own. Numbers it only repeats from the task or negates are no evidence;
    numbers offered as alternatives ("78, 79 or 80") share the credit."""
    target = numbers_in(expected)[0]
    tolerance = float(config.get("tolerance", 1e-6))

    def right(value: float) -> bool:
        return abs(value - target) <= tolerance * max(1.0, abs(target))

    reading = Reading(task, output)
    text = reading.text
    own: list[re.Match] = []
    echoed, negation = False, ""
    markers = list_markers(text)
    for found in NUMBER.finditer(text):
        if found.start() in markers:
            continue
        if reading.echoed(*found.span()):
            echoed = echoed or right(float(found.group(0).replace(",", "")))
        elif words := reading.negation(*found.span(), nil_after=False):
            if right(float(found.group(0).replace(",", ""))):
                negation = negation or words
        else:
            own.append(found)
    values = [float(m.group(0).replace(",", "")) for m in own]
    details: dict[str, Any] = {"found": numbers_in(output), "own": values}

    def alternatives(i: int) -> list[float]:
        lo = hi = i
        while lo > 0 and _ALTERNATIVE_GAP.fullmatch(text, own[lo - 1].end(), own[lo].start()):
            lo -= 1
        while hi + 1 < len(own) and _ALTERNATIVE_GAP.fullmatch(text, own[hi].end(), own[hi + 1].start()):
            hi += 1
        return list(dict.fromkeys(values[lo : hi + 1]))

    checking = _CHECKING.search(text)

    def concludes(i: int, marker: re.Pattern) -> bool:
        if marker is _EQUALS and checking and own[i].start() > checking.start():
            return False
        before = text[max(0, own[i].start() - 60) : own[i].start()]
        return marker.search(before) is not None and not _OPERATOR_AFTER.match(text, own[i].end())

    concluded = next(
        (i for marker in (_STATED, _EQUALS) for i in reversed(range(len(own))) if concludes(i, marker)), None
    )
    if concluded is not None:
        details["concluded"] = values[concluded]
        candidates = alternatives(concluded)
    else:
        hits = [alternatives(i) for i, value in enumerate(values) if right(value)]
        candidates = min(hits, key=len) if hits else []
    details["candidates"] = candidates
    if any(right(value) for value in candidates):
        if len(candidates) > 1:
            listed = _listed([f"{v:g}" for v in candidates])
            score = 1 / len(candidates)
            return score, f"The answer hedges between {listed}: the expected {target:g} is one of them.", details
        verb = "concludes" if concluded is not None else "contains"
        return 1.0, f"The answer {verb} {candidates[0]:g}, the expected {target:g}.", details
    if concluded is not None:
        aside = f" ({target:g} appears too, but is not what it concludes)" if any(map(right, values)) else ""
        return 0.0, f"The answer concludes {values[concluded]:g}, not the expected {target:g}{aside}.", details
    if reading.only_echoes:
        return 0.0, ECHO_FEEDBACK, details
    has = ", ".join(f"{v:g}" for v in values) or "no numbers of its own"
    reasons = [f"{target:g} is negated: “{negation}”"] if negation else []
    if echoed:
        reasons.append(f"{target:g} appears only where the answer repeats the task")
    return 0.0, f"Expected {target:g}; the answer has {has}" + "".join(f"; {r}" for r in reasons) + ".", details


def _compare_labels(expected: str, output: str, config: dict, task: str = "") -> tuple[float, str, dict]:
    """The expected labels as a set: each one the answer asserts (not only repeats from the task,
    not negated) counts; one it asserts beside a contradicting label counts half."""
    wanted = {normalise(p) for p in _LABEL_SEPARATORS.split(expected) if normalise(p)}
    if not wanted:
        raise EvaluatorError("The expected answer has no labels to look for.")
    reading = Reading(task, output)
    opposed = _contradictions(config)
    credit: dict[str, float] = {}
    notes: list[str] = []
    rivals_said: set[str] = set()
    for label in sorted(wanted):
        said = reading.said(label)
        rivals = _rivals(label, reading, opposed, wanted)
        rivals_said.update(rivals)
        if said.how == "asserted":
            credit[label] = 0.5 if rivals else 1.0
            if rivals:
                notes.append(f"“{label}” is said beside {_listed([f'“{c}”' for c in rivals])}, which contradicts it")
        else:
            credit[label] = 0.0
            if said.how != "absent":
                notes.append(unsaid(label, said))
            notes += _contradicted(label, said, rivals)
    present = {label for label, c in credit.items() if c > 0}
    details: dict[str, Any] = {"expected": sorted(wanted), "found": sorted(present)}
    universe = {normalise(str(label)) for label in config.get("all_labels", [])}
    true_positive = sum(credit.values())
    if universe:
        # With the full label set known, naming a wrong label costs precision too (F1); so does
        # a contradicting one.
        predicted = {label for label in universe | wanted if reading.said(label).how == "asserted"} | rivals_said
        precision = true_positive / len(predicted) if predicted else 0.0
        recall = true_positive / len(wanted)
        score = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        details.update(predicted=sorted(predicted), precision=precision, recall=recall)
    else:
        score = true_positive / len(wanted)
    if not present and reading.only_echoes:
        return 0.0, ECHO_FEEDBACK, details
    missing = sorted(label for label in wanted if reading.said(label).how == "absent")
    parts = ["Missing labels: " + ", ".join(missing) + "."] if missing else []
    # Said so, or a reader sees "all expected labels present" beside a score below 1.
    wrong = sorted(label for label in details.get("predicted", []) if label not in wanted and label not in rivals_said)
    parts += [f"Also names {', '.join(wrong)}, which should not be named."] if wrong else []
    parts += [note[0].upper() + note[1:] + "." for note in notes]
    if wrong:
        details["shortfall"] = OVERREACH
    elif missing:
        details["shortfall"] = "leaves out expected labels"
    return score, " ".join(parts) or "All expected labels present.", details


def _compare_regex(expected: str, output: str, config: dict, task: str = "") -> tuple[float, str, dict]:
    pattern = expected.strip()[1:-1] if expected.strip().startswith("/") else expected.strip()
    try:
        matches = list(saferegex.finditer(pattern, output, ignore_case=True, dot_all=True))
    except saferegex.PatternError as exc:
        raise EvaluatorError(f"The expected answer cannot be used as a pattern: {exc}") from exc
    # The pattern is the author's own: it is read as written, but a match inside a repeat of the
    # task is still no evidence.
    reading = Reading(task, output, fold=False)
    own = next((m for m in matches if not reading.echoed(*m.span())), None)
    if own:
        return 1.0, f"The answer matches /{pattern}/.", {"match": own.group(0)[:200]}
    if matches:
        if reading.only_echoes:
            return 0.0, ECHO_FEEDBACK, {"match": matches[0].group(0)[:200]}
        return 0.0, f"The answer matches /{pattern}/ only where it repeats the task.", {}
    return 0.0, f"The answer does not match /{pattern}/.", {}


def _compare_exact(expected: str, output: str, config: dict, task: str = "") -> tuple[float, str, dict]:
    ok = expected.strip() == output.strip()
    return float(ok), "Exactly the expected answer." if ok else "Not exactly the expected answer.", {}


def _compare_normalised(expected: str, output: str, config: dict, task: str = "") -> tuple[float, str, dict]:
    """The expected answer, contained in the answer and asserted there: not only repeated from
    the task, not negated; asserted beside a contradicting label, it counts half."""
    want, got = normalise(expected), normalise(output)
    if want == got:
        return 1.0, "The expected answer, up to case and punctuation.", {}
    if not want:
        return 0.0, "The answer does not contain the expected answer.", {}
    reading = Reading(task, output)
    said = reading.said(want)
    rivals = _rivals(want, reading, _contradictions(config), {want})
    details = {"said": said.how, "contradicting": rivals}
    if said.how == "asserted":
        if rivals:
            others = _listed([f"“{c}”" for c in rivals])
            return 0.5, f"The answer says “{want}” but also says {others}, which contradicts “{want}”.", details
        return 1.0, "The answer contains the expected answer.", details
    if reading.only_echoes:
        return 0.0, ECHO_FEEDBACK, details
    reasons = ([unsaid(want, said)] if said.how != "absent" else []) + _contradicted(want, said, rivals)
    if not reasons:
        return 0.0, "The answer does not contain the expected answer.", details
    return 0.0, "Not credited: " + "; ".join(reasons) + ".", details


COMPARISONS = {
    "numeric": _compare_numeric,
    "labels": _compare_labels,
    "regex": _compare_regex,
    "exact": _compare_exact,
    "normalised": _compare_normalised,
}


def workspace_choices(run: Run, expected: str, *, limit: int = 500) -> list[str]:
    """When every label the expected answer lists names a file of the run's workspace (by its
    name or its name without the extension), the task was a choice among the files of their
    folders ("name every urgent email", "which files mention X"): those files' names are the
    labels the answer may name, rightly or wrongly. Empty otherwise, or past ``limit`` files."""
    workspace = run.task.workspace
    if workspace is None or not workspace.path.is_dir():
        return []
    folders: dict[str, set] = {}
    for count, path in enumerate(p for p in workspace.path.rglob("*") if p.is_file()):
        if count >= limit:
            return []
        for name in (path.name, path.stem):
            folders.setdefault(normalise(name), set()).add(path.parent)
    wanted = [normalise(label) for label in expected_labels(expected)]
    if not wanted or not all(label in folders for label in wanted):
        return []
    chosen_from = set().union(*(folders[label] for label in wanted))
    return sorted({path.stem for folder in chosen_from for path in folder.iterdir() if path.is_file()})


def reference_evaluator(run: Run, config: dict) -> Verdict | None:
    """Compare the final answer with the task's expected answer; not applicable without one.
    Only what the answer asserts counts (see reading.py). Its verdict:
    accomplished when the answer matches fully (score 1: every expected label, the number, the
    pattern), not accomplished otherwise."""
    expected = run.task.expected_answer
    if not expected.strip():
        return None
    mode = config.get("mode", "auto")
    if mode == "auto":
        mode = choose_mode(expected)
        choices = workspace_choices(run, expected) if mode in ("labels", "normalised") else []
        if choices and "all_labels" not in config:
            # A choice among the workspace's files: naming one not chosen is a wrong label too.
            mode, config = "labels", {**config, "all_labels": choices}
    compare = COMPARISONS.get(mode)
    if compare is None:
        raise EvaluatorError(f"Unknown reference mode {mode!r}; use one of {', '.join(COMPARISONS)}.")
    score, feedback, details = compare(expected, run.final_output or "", config, run.task.text or "")
    if score < 1.0:
        details.setdefault("shortfall", ECHOES if feedback == ECHO_FEEDBACK else "does not give the expected answer")
    return Verdict(score=score, feedback=feedback, details={"mode": mode, **details}, accomplished=score >= 1.0)
