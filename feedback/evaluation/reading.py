"""What an answer asserts, read against its task (for the reference evaluator, reference.py): where
it repeats the task, what it negates, and so whether it asserts a label or only echoes or negates it.

Holding the expected label or number somewhere is not enough: a real small model got 1.0 for
repeating the question, which held the label, and for "low priority, not urgent" against "urgent"
(issue 15). A match counts only where the answer asserts it: not inside a stretch copied from the
task, not negated, not hedged with a contradicting label or with rival numbers. The rules read
words, not meaning; each one that withholds credit says so in the feedback.
"""

import re
import unicodedata
from dataclasses import dataclass

_WORD = re.compile(r"\w+(?:'\w+)*")
# Fewer of the task's words in a row are a shared phrase ("the urgent ones"), not a quote.
QUOTE_MIN_WORDS = 4
# A match with this many quoted words around it came with the quote; one without them is the
# answer picking an option the task offered ("the report has 80 words").
ECHO_CONTEXT_WORDS = 3
# How far ahead a negator still reaches its label: "none of these emails is urgent" (NegEx's 5).
NEGATION_REACH_WORDS = 5
_NEGATORS = frozenset({"not", "no", "none", "nothing", "never", "neither", "nor", "without", "non", "nobody", "cannot"})
# A negation ends at a clause mark, at a word that starts another claim ("not spam but urgent"), or
# at a preposition that starts a phrase of its own ("no reply is needed for the urgent one").
_SCOPE_ENDS = frozenset(
    {"but", "however", "although", "though", "yet", "except", "whereas", "while", "and", "instead", "rather", "which"}
    | {"for", "from", "with", "by", "about", "because", "since", "if", "when", "then"}
)
_SCOPE_TOKEN = re.compile(r"(?P<word>\w+(?:'\w+)*)|(?P<mark>[.,;:!?()\[\]{}…|—–\n])")
# "Urgent: none", "urgent emails - 0", "urgent? no": the label, then nil as its whole count or
# answer ("billing: no refund yet" is billing).
_NIL_AFTER = re.compile(r"(?:\s+\w+){0,2}\s*[:=?—–-]+\s*(?:none|nothing|no|zero|0)(?=\s*(?:$|[.,;!?)\]]))")


def _fold(text: str) -> str:
    # Typographic apostrophes count as plain ones: "isn’t urgent" is negated too.
    return unicodedata.normalize("NFKC", text).casefold().replace("’", "'")


@dataclass(frozen=True)
class _Quote:
    start: int
    end: int
    words: tuple[tuple[int, int], ...]  # each quoted word's span


@dataclass(frozen=True)
class Said:
    """How an answer says a label: asserted somewhere, or only negated, only echoed, or not at all."""

    how: str  # "asserted", "negated", "echoed" or "absent"
    negation: str = ""  # the negating words, for the feedback


class Reading:
    """An answer read against its task: where it repeats the task, and what it negates."""

    def __init__(self, task: str, answer: str, *, fold: bool = True) -> None:
        self.text = _fold(answer) if fold else answer
        task_words = [w.casefold() for w in _WORD.findall(_fold(task))]
        words = list(_WORD.finditer(self.text))
        # A task shorter than QUOTE_MIN_WORDS is quoted whole; a one-word task cannot be.
        self._run = min(QUOTE_MIN_WORDS, len(task_words))
        self._context = min(ECHO_CONTEXT_WORDS, self._run - 1)
        self.quotes = self._quotes(task_words, words) if self._run >= 2 else []
        quoted = sum(len(q.words) for q in self.quotes)
        self.only_echoes = bool(words) and quoted == len(words)

    def _quotes(self, task_words: list[str], words: list[re.Match]) -> list[_Quote]:
        """The stretches of the answer copied word for word from the task: every run of at least
        ``self._run`` words that the task has in the same order, joined where they touch."""
        k = self._run
        grams = {tuple(task_words[i : i + k]) for i in range(len(task_words) - k + 1)}
        folded = [w.group(0).casefold() for w in words]
        covered = [False] * len(words)
        for i in range(len(words) - k + 1):
            if tuple(folded[i : i + k]) in grams:
                covered[i : i + k] = [True] * k
        quotes, i = [], 0
        while i < len(words):
            if not covered[i]:
                i += 1
                continue
            j = i
            while j + 1 < len(words) and covered[j + 1]:
                j += 1
            quotes.append(_Quote(words[i].start(), words[j].end(), tuple(w.span() for w in words[i : j + 1])))
            i = j + 1
        return quotes

    def echoed(self, start: int, end: int) -> bool:
        """Whether text[start:end] is there only because the answer repeats the task: it lies in
        a quote with at least ``ECHO_CONTEXT_WORDS`` quoted words around it (fewer when the
        task itself is shorter than a quote)."""
        for quote in self.quotes:
            if quote.start <= start and end <= quote.end:
                around = sum(1 for s, e in quote.words if e <= start or s >= end)
                return around >= self._context
        return False

    def negation(self, start: int, end: int, *, nil_after: bool = True) -> str:
        """The words that negate text[start:end] ("not urgent", "isn't urgent", "no urgent
        emails", "non-urgent", "urgent: none"), or "" when nothing does."""
        before = self.text[max(0, start - 160) : start]
        offset = start - len(before)
        for between, token in enumerate(reversed(list(_SCOPE_TOKEN.finditer(before)))):
            word = token.group(0)
            if token.lastgroup == "mark" or word in _SCOPE_ENDS or between > NEGATION_REACH_WORDS:
                break
            if word in _NEGATORS or word.endswith("n't"):
                return self.text[offset + token.start() : end]
        after = _NIL_AFTER.match(self.text, end) if nil_after else None
        return self.text[start : after.end()] if after else ""

    def said(self, label: str) -> Said:
        words = _WORD.findall(_fold(label))
        if not words:
            return Said("absent")
        pattern = re.compile(r"(?<!\w)" + r"[\W_]+".join(map(re.escape, words)) + r"(?!\w)")
        negation, echoed = "", False
        for found in pattern.finditer(self.text):
            if self.echoed(*found.span()):
                echoed = True
            elif words_negating := self.negation(*found.span()):
                negation = negation or words_negating
            else:
                return Said("asserted")
        if negation:
            return Said("negated", negation)
        return Said("echoed" if echoed else "absent")


def unsaid(label: str, said: Said) -> str:
    """Why a label the answer has is no evidence (feedback)."""
    if said.how == "negated":
        return f"“{label}” is negated: “{said.negation}”"
    if said.how == "echoed":
        return f"“{label}” appears only where the answer repeats the task"
    return f"“{label}” is missing"
