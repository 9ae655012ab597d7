"""The reflector: after a failed step it writes an analysis the model reads next turn, and it
detects loops (the same call failing the same way again, or succeeding again with the arguments
of an earlier success: its result is already in the conversation).

Rule-based on purpose: it runs after every failure, costs nothing, and behaves the same with
every model, so what it teaches can be measured.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from itertools import takewhile

from django.conf import settings

from feedback.models import Step

from .guardrails import ALWAYS_OFFERED
from .tools import Tool

_HINTS = [
    ("InvalidToolCall", "Unknown tool", "Use only the tools listed, with exactly their names."),
    ("InvalidToolCall", "", "Check the arguments against the tool's JSON Schema before calling it again."),
    ("ToolError", "No such file", "Use a path the error names, exactly as written; if none fits, list the directory."),
    ("ToolError", "No such directory", "List the workspace root to see which folders exist."),
    ("ToolError", "leave the workspace", "Use paths relative to the workspace root, without '..'."),
    ("ToolError", "Absolute paths", "Use paths relative to the workspace root."),
    ("ToolTimeout", "", "The tool timed out; ask for less, or use another tool."),
    ("CircuitOpen", "", "The tool is unavailable for now; continue without it."),
    ("Refused", "", "A person refused this action; do not try it again, finish without it."),
]


@dataclass(frozen=True)
class Reflection:
    text: str
    give_up: str = ""  # set when the run should end instead of trying again


def _hint(step: Step) -> str:
    for error_class, needle, hint in _HINTS:
        if step.error_class == error_class and needle in step.error:
            return hint
    return "Think about why it failed, then try another way."


def _repeated(steps: list[Step], tools: Mapping[str, Tool]) -> list[Step]:
    """This turn's successful calls of idempotent tools (the same arguments give the same result;
    a tool that acts may well be called again: a no-op, a reply sent; the plan aside) that repeat an
    earlier turn's successful call with the same arguments. On the local model every triage run that
    read the file an error named read it again until the step limit (docs/local-model.md, run 13):
    the latest instruction it had was still the error's. Told so, it read on still; the reflection
    says why the run went round."""

    def candidate(s: Step) -> bool:
        tool = tools.get(s.tool_name)
        return (
            s.kind == Step.Kind.TOOL_CALL
            and s.success is True
            and s.tool_name not in ALWAYS_OFFERED
            and tool is not None
            and tool.idempotent
        )

    turn = steps[-1].turn if steps else None
    # This turn's steps are the last ones: a turn without a candidate reads no further back.
    this_turn = list(takewhile(lambda s: s.turn == turn, reversed(steps)))
    now = [s for s in reversed(this_turn) if candidate(s)]
    if not now:
        return []
    earlier = [(s.tool_name, s.arguments) for s in steps[: len(steps) - len(this_turn)] if candidate(s)]
    return [s for s in now if (s.tool_name, s.arguments) in earlier]


def reflect(steps: list[Step], failed: list[Step], *, tools: Mapping[str, Tool] | None = None) -> Reflection | None:
    """Analyse this turn's failed tool calls, and its calls of ``tools`` that are idempotent and
    repeat an earlier success, in the light of the run's earlier ``steps``."""
    repeated = _repeated(steps, tools or {})
    if not failed and not repeated:
        return None
    lines = [
        f"- {step.tool_name}({_short(step.arguments)}) repeats an earlier call, whose result you have: "
        "use it, or call a tool with other arguments."
        for step in repeated
    ]
    worst = 0
    for step in failed:
        same = [
            s.arguments
            for s in steps
            if s.kind == Step.Kind.TOOL_CALL
            and s.success is False
            and s.error_signature == step.error_signature
            and s.tool_name == step.tool_name
            and s.index <= step.index
        ]
        repeats = sum(1 for args in same if args == step.arguments)
        worst = max(worst, repeats)
        line = f"- {step.tool_name}({_short(step.arguments)}) failed: {step.error} {_hint(step)}"
        if repeats > 1:
            line += (
                f" This exact call has now failed {repeats} times: do not repeat it;"
                " change the arguments or the approach."
            )
        lines.append(line)
    if worst >= settings.AGENT_MAX_IDENTICAL_FAILURES:
        return Reflection(
            text="\n".join(lines),
            give_up=f"Stopped: the same call failed the same way {worst} times "
            f"({failed[0].tool_name}: {failed[0].error})",
        )
    # No closing "re-plan" instruction: the loop marks the plan's step in progress failed itself
    # (_plan_failed), and after an error that names the way out (the files to read) a small model
    # copied that sentence instead of following the hint (43 times in 19 triage runs, docs/local-model.md run 12).
    return Reflection(text="Reflection on the last step:\n" + "\n".join(lines))


def _short(arguments: object) -> str:
    text = arguments if isinstance(arguments, str) else ", ".join(f"{k}={v!r}" for k, v in (arguments or {}).items())
    return text if len(text) <= 120 else text[:117] + "..."
