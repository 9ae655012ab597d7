"""Proposal text that generalises: what of the evidence must never reach a strategy's title or guidance.

A strategy's guidance goes into the prompt of every matching run. Text pasted from the evidence
carried the tasks' reference answers with it ("make sure the final answer addresses: Expected
49", "meets the exact number of words specified by 80"), which teaches the answer to one task
instead of a lesson for all of them, and inflates a trial that reruns the same tasks. So:

- ``secrets(run_ids)`` collects what the evidence runs must not give away: each task's expected
  answer, every number in one, and the file and folder names their tool calls used;
- ``leaks(text, secrets)`` lists what of those a text contains, plus anything shaped like a file
  name (``name.ext``) or a path: a lesson names no particular file;
- ``redact(text, secrets)`` blanks them out; ``generalise`` also normalises the text as error
  signatures are, for the short error snippets a title may quote (the rest of the wording comes
  from the pattern's kind, never from the evidence).
"""

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from feedback.agent.errors import normalise_message
from feedback.models import Run, Step

_NUMBER = re.compile(r"\d+(?:[.,]\d+)?")
# "quarterly-report.txt", "notes_3.md": a name of two characters or more and an extension that
# starts with a letter, so "e.g." and "3.5" are not file names.
_FILE = re.compile(r"(?<![\w/.-])[\w-]{2,}\.[A-Za-z][A-Za-z0-9]{0,4}(?![\w])")
_PATH = re.compile(r"(?<!\S)[\w.-]*\w/[\w./-]*|\b[\w.-]+/[\w./-]+")
# Argument names whose values are file or folder names.
_PATH_ARGUMENTS = ("path", "file", "filename", "folder", "directory", "dir")
_PLACEHOLDERS = ("<q>", "<n>", "<path>", "<file>", "<…>")


@dataclass(frozen=True)
class Secrets:
    answers: frozenset[str] = field(default_factory=frozenset)  # expected answers, lower-cased
    numbers: frozenset[str] = field(default_factory=frozenset)  # numbers in them, as written
    names: frozenset[str] = field(default_factory=frozenset)  # file and folder names, lower-cased


def _answer_forms(expected: str) -> set[str]:
    """The expected answer as it may be quoted: whole, and without a regex's slashes and \\b."""
    stripped = expected.strip()
    forms = {stripped}
    if len(stripped) > 2 and stripped.startswith("/") and stripped.endswith("/"):
        body = stripped[1:-1]
        forms |= {body, re.sub(r"\\[bBsSdDwW]", " ", body).strip()}
    # Shorter answers ("7", "no") are checked through their numbers only: as words they would
    # match half the language.
    return {f.lower() for f in forms if len(f) >= 3}


def secrets(run_ids: Iterable[int]) -> Secrets:
    """What the evidence runs' text must not give away (two queries, however many runs)."""
    ids = list(run_ids)
    answers: set[str] = set()
    numbers: set[str] = set()
    for expected in (
        Run.objects.filter(pk__in=ids).exclude(task__expected_answer="").values_list("task__expected_answer", flat=True)
    ):
        answers |= _answer_forms(expected)
        numbers |= {n for n in _NUMBER.findall(expected)}
    names: set[str] = set()
    calls = Step.objects.filter(run_id__in=ids, kind=Step.Kind.TOOL_CALL).exclude(arguments=None)
    for arguments in calls.values_list("arguments", flat=True).iterator():
        if not isinstance(arguments, dict):
            continue
        for key in _PATH_ARGUMENTS:
            value = arguments.get(key)
            if isinstance(value, str) and value.strip(" ./"):
                path = PurePosixPath(value.strip())
                names |= {path.as_posix().lower(), path.name.lower()}
                names |= {p.lower() for p in path.parts if len(p) >= 3 and p not in ("..", ".")}
    return Secrets(frozenset(answers), frozenset(numbers), frozenset(n for n in names if len(n) >= 3))


def _number_pattern(number: str) -> re.Pattern:
    # The number as a token: "49" in "Expected 49." but not in "1490" or "0.49".
    return re.compile(rf"(?<![\w.,]){re.escape(number)}(?![\d]|[.,]\d)")


def _word_pattern(word: str) -> re.Pattern:
    return re.compile(rf"(?<![\w.-]){re.escape(word)}(?![\w-]|\.\w)", re.I)


def leaks(text: str, found: Secrets) -> list[str]:
    """What ``text`` gives away: expected answers, their numbers, file names and paths."""
    lowered = text.lower()
    out = [a for a in sorted(found.answers) if (len(a) >= 6 and a in lowered) or _word_pattern(a).search(text)]
    out += [n for n in sorted(found.numbers) if _number_pattern(n).search(text)]
    out += [n for n in sorted(found.names) if _word_pattern(n).search(text)]
    out += _FILE.findall(text)
    out += [p for p in _PATH.findall(text) if not any(ph in p for ph in _PLACEHOLDERS)]
    return out


def redact(text: str, found: Secrets) -> str:
    """``text`` with what it gives away replaced by placeholders (its case kept)."""
    for answer in sorted(found.answers, key=len, reverse=True):
        text = re.compile(re.escape(answer), re.I).sub("<…>", text)
    for number in sorted(found.numbers, key=len, reverse=True):
        text = _number_pattern(number).sub("<n>", text)
    for name in sorted(found.names, key=len, reverse=True):
        text = _word_pattern(name).sub("<file>", text)
    text = _FILE.sub("<file>", text)
    return _PATH.sub(lambda m: m.group(0) if any(ph in m.group(0) for ph in _PLACEHOLDERS) else "<path>", text)


def generalise(text: str, found: Secrets) -> str:
    """``redact``, then normalised as error signatures are (quoted parts and numbers blanked,
    lower case): for a snippet of an error message."""
    return normalise_message(redact(text, found))
