"""What the loop checks in a reply before it acts on it (``unusable``): the adapter's reason, if
it found one; an empty reply; and two generic rules, the same for every model, written in the
runtime's terms (its instructions, its refusals), never in any one model's wording.

- **An echo**: a reply that mostly repeats one of the runtime's instructions (a reflection's
  re-plan, a correction of an unusable reply) instead of following it is no answer. What the runtime
  quoted there of a tool (its error, the call's arguments) is not its instruction: a reply that
  reports the tool's error is an answer, not an echo.
- **A guardrail's refusal quoted**: a refusal is the runtime's message to the model (its
  observation says so: conversation.observation_of), never text for the person who asked. An
  answer that quotes one is asked for again, so the guardrail's wording never reaches an answer.
"""

import json
import re
from collections.abc import Iterable

from feedback.models import Step

from .guardrails import REFUSAL_MARKER
from .llm import LLMReply

GUARDRAIL_REFUSED = "GuardrailRefused"
ECHOED = "Your reply repeated the instruction instead of following it: do it now with a tool call, or answer the task."
QUOTED_REFUSAL = (
    "Your answer quoted a guardrail's refusal, which is the runtime's message to you, not something to tell "
    "the user: do what it asks with a tool call, or answer the task in your own words without it."
)
_WORD = re.compile(r"[a-z0-9_]+")
_MARKER = re.compile(rf"\b{re.escape(REFUSAL_MARKER)}", re.I)


def _trigrams(text: str) -> set[tuple[str, ...]]:
    words = _WORD.findall(text.lower())
    return {tuple(words[i : i + 3]) for i in range(len(words) - 2)}


def _text(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _quoted(steps: Iterable[Step]) -> set[tuple[str, ...]]:
    """The word triples the runtime quotes of failed tool calls (their errors and arguments)."""
    quoted: set[tuple[str, ...]] = set()
    for s in steps:
        if s.kind == Step.Kind.TOOL_CALL and s.success is False:
            quoted |= _trigrams(s.error) | _trigrams(_text(s.arguments))
    return quoted


def echoes_instruction(reply: str, steps: list[Step]) -> bool:
    """Whether ``reply`` is mostly a copy of the runtime's own words in one of the instructions it
    gave the model in this run (a reflection, a correction): not only the last, since the reply
    after "your reply repeated the instruction" may repeat the one before it again. Most of the
    reply's word triples (leaving out those quoted of tools) must be that instruction's: an
    answer that quotes a phrase of one, or reports a tool's error, is an answer."""
    told = [s.thought for s in steps if s.kind in (Step.Kind.REFLECTION, Step.Kind.MODEL_ERROR) and s.thought]
    if not told:
        return False
    quoted = _quoted(steps)
    trigrams = _trigrams(reply)
    if len(trigrams) < 3:
        corrections = [s.thought for s in steps if s.kind == Step.Kind.MODEL_ERROR and s.thought]
        return _fragment_of(reply, corrections, steps)
    said = trigrams - quoted
    return len(said) >= 3 and any(len(said & (_trigrams(t) - quoted)) >= 0.6 * len(said) for t in told)


def _fragment_of(reply: str, told: list[str], steps: list[Step]) -> bool:
    """A short reply of two words or more, no figure among them, that is a run of words of a
    correction the runtime gave (``call tools`` of "...: call tools, or answer in words."): a piece
    of the instruction, not an answer. Only the corrections, the runtime's own sentences: a
    reflection quotes the tools (a file's name, a hint) that a short answer may rightly name; and
    what the runtime quoted of a failed call (its error, its arguments) is a report."""
    piece = _spaced(reply)
    words = piece.split()
    if len(words) < 2 or any(w.isdigit() for w in words):
        return False
    failed = [s for s in steps if s.kind == Step.Kind.TOOL_CALL and s.success is False]
    if any(piece in _spaced(s.error) or piece in _spaced(_text(s.arguments)) for s in failed):
        return False
    return any(piece in _spaced(t) for t in told)


def _spaced(text: str) -> str:
    """Its words, lower-cased, one space between and around them: word runs compare as substrings."""
    return " " + " ".join(_WORD.findall(text.lower())) + " "


def quoted_refusal(answer: str, steps: Iterable[Step]) -> str:
    """The guardrail refusal ``answer`` quotes, or "": it carries the refusals' marker, or half
    (at least three) of one refusal's word triples, those of the refused call's arguments aside
    (an answer may well name the file it was asked about)."""
    refusals = [
        s
        for s in steps
        if s.kind in (Step.Kind.TOOL_CALL, Step.Kind.MODEL_ERROR) and s.error_class == GUARDRAIL_REFUSED and s.error
    ]
    if not refusals:
        return ""
    said = _trigrams(answer)
    for refusal in refusals:
        own = _trigrams(refusal.error) - _trigrams(_text(refusal.arguments))
        if _MARKER.search(answer) or len(said & own) >= max(3, len(own) / 2):
            return refusal.error
    return ""


def unusable(reply: LLMReply, steps: list[Step]) -> tuple[str, str]:
    """Why the loop cannot act on ``reply`` (what the model is told) and the model error's class,
    or ("", "") when it can: the adapter's reason, an empty reply, an echo, a quoted refusal."""
    if reply.unusable:
        return reply.unusable, "MalformedReply"
    if reply.tool_calls:
        return "", ""
    if not reply.content.strip():
        return "Your last reply was empty.", "EmptyReply"
    # Classes of their own: not reply formats mining finds remedies for.
    if echoes_instruction(reply.content, steps):
        return ECHOED, "EchoedInstruction"
    if quoted_refusal(reply.content, steps):
        return QUOTED_REFUSAL, "QuotedRefusal"
    return "", ""
