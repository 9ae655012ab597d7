"""The insight writer: from one failed run and one successful run of a similar task, the operations
on the task kind's insight list (insight_ops.py).

- With an OpenAI-compatible endpoint (and STRATEGY_PROPOSAL_WRITER "model"), the model writes them:
  it is shown both trajectories (short and masked, as worked examples are) and the numbered list,
  and asked through the model edge's structured answers (formats.py: the strictest JSON format the
  endpoint takes). The call is timed and recorded with the pair; what it answers is read strictly,
  an operation that cannot be used is ignored with its reason. An endpoint that cannot be reached
  leaves the pair to the rules, and that is recorded too.
- Otherwise (the offline demo model), rules write them from the difference of the two runs: a tool
  the success called and the failure did not; a tool error the failure hit and the success
  avoided; a call the model wrote wrong (unknown tool, unusable arguments); and an insight telling
  to call a tool that the failure called and the success did without is down-voted.

Whatever writes them, an insight quoting the evidence (an expected answer, a number of one, a file
name: generalise.py) is ignored: the list goes into the prompt of every run of the kind.
"""

import json
import re
import time
from dataclasses import dataclass, field

from django.conf import settings

from feedback.agent.guardrails import last_results, states_result
from feedback.agent.llm import LLMError, use_endpoint
from feedback.models import Run, Step

from .examples import masked
from .generalise import leaks, secrets
from .insight_ops import Ignored, Operation, numbered, parse_operations
from .replies import INVALID_CALL

MAX_CALLS = 8
_CALL_TO = re.compile(r"\bcall (\w+)")

INSIGHTS_SCHEMA = {
    "type": "object",
    "properties": {
        "operations": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "op": {"type": "string", "enum": ["ADD", "EDIT", "UPVOTE", "DOWNVOTE"]},
                    "index": {"type": "integer", "description": "the insight's number; 0 for ADD"},
                    "text": {"type": "string", "description": "the insight for ADD and EDIT; empty otherwise"},
                },
                "required": ["op", "index", "text"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["operations"],
    "additionalProperties": False,
}

INSIGHTS_PROMPT = """You keep a short list of insights: general rules that help an AI agent succeed at {kind} tasks.
Compare a failed attempt with a successful attempt at a similar task, then update the list with at most 3 operations:
- ADD: a new insight (index 0), when the attempts teach something the list does not say;
- EDIT: rewrite insight <index> so that it covers what the attempts teach;
- UPVOTE: insight <index> is confirmed by the attempts;
- DOWNVOTE: insight <index> is contradicted by the attempts, or useless.
An insight is one imperative sentence that holds for every {kind} task: never quote an answer, a number or a file name.
Reply with JSON only, for example:
{{"operations": [{{"op": "ADD", "index": 0, "text": "..."}}, {{"op": "UPVOTE", "index": 2, "text": ""}}]}}"""


@dataclass(frozen=True)
class Trajectory:
    """What a run did, as the writer sees it."""

    run_id: int
    text: str  # short and masked
    tools: tuple[str, ...]  # the tools it called (besides the plan), in the order first called
    errors: tuple[tuple[str, str], ...]  # (tool, error class) of its failed calls, first first
    wrote_wrong_calls: bool  # a call of an unknown tool, or with unusable arguments
    # The tools whose last result its answer does not state (guardrails.states_result).
    unstated: tuple[str, ...] = ()


@dataclass
class Written:
    operations: list[Operation]
    ignored: list[Ignored] = field(default_factory=list)
    writer: str = "rules"
    call: dict = field(default_factory=dict)  # the model call: model, format, tokens, duration_ms, error


def trajectory(run: Run) -> Trajectory:
    """A run's trajectory, its calls cut to MAX_CALLS lines, every text masked (examples.py)."""
    lines = [f"Task: {masked(run.task.text, 200)}"]
    tools: list[str] = []
    errors: list[tuple[str, str]] = []
    wrong = False
    calls = run.steps.filter(kind=Step.Kind.TOOL_CALL).exclude(tool_name="update_plan").order_by("index")
    for n, step in enumerate(calls):
        if step.error_class == INVALID_CALL:
            wrong = True
        elif step.tool_name not in tools:
            tools.append(step.tool_name)
        if not step.success and step.error_class != INVALID_CALL and (step.tool_name, step.error_class) not in errors:
            errors.append((step.tool_name, step.error_class or "error"))
        if n < MAX_CALLS:
            outcome = "ok" if step.success else f"failed: {masked(step.error, 100)}"
            lines.append(f"- {step.tool_name}({masked(json.dumps(step.arguments), 100)}) -> {outcome}")
        elif n == MAX_CALLS:
            lines.append("- …")
    answer = run.final_output or run.error or "(none)"
    lines.append(f"Final answer: {masked(answer, 200)}")
    results = last_results(calls)
    unstated = tuple(tool for tool, values in results.items() if values and not states_result(answer, values))
    return Trajectory(run.pk, "\n".join(lines), tuple(tools), tuple(errors), wrong, unstated)


def _kind_words(kind: str) -> str:
    return kind.replace("_", " ")


def _add_or_upvote(text: str, insights: list[dict], ops: list[Operation]) -> None:
    for n, item in enumerate(insights, start=1):
        if item["text"].casefold() == text.casefold():
            ops.append(Operation("UPVOTE", n))
            return
    ops.append(Operation("ADD", 0, text))


def rule_operations(kind: str, failing: Trajectory, succeeding: Trajectory, insights: list[dict]) -> list[Operation]:
    """The operations the difference of the two runs supports, in generic words only."""
    words, ops = _kind_words(kind), []
    for tool in succeeding.tools:
        if tool not in failing.tools:
            _add_or_upvote(f"For {words} tasks, call {tool} and use its result before answering.", insights, ops)
    for tool, error_class in failing.errors:
        if (tool, error_class) not in succeeding.errors:
            text = (
                f"For {words} tasks, avoid {tool} calls that fail with {error_class}: check the call's arguments "
                "against the task and the workspace before making it."
            )
            _add_or_upvote(text, insights, ops)
    for tool in failing.unstated:
        if tool in succeeding.tools and tool not in succeeding.unstated:
            text = f"For {words} tasks, answer with the result {tool} returns, not with what you gave it."
            _add_or_upvote(text, insights, ops)
    if failing.wrote_wrong_calls and not succeeding.wrote_wrong_calls:
        text = f"For {words} tasks, call only the tools offered, with arguments that match their parameters."
        _add_or_upvote(text, insights, ops)
    # An insight telling to call a tool the failure called while the success did without: contradicted.
    for n, item in enumerate(insights, start=1):
        told = set(_CALL_TO.findall(item["text"]))
        if any(tool in failing.tools and tool not in succeeding.tools for tool in told):
            ops.append(Operation("DOWNVOTE", n))
    return ops


def _model_messages(kind: str, failing: Trajectory, succeeding: Trajectory, insights: list[dict]) -> list[dict]:
    user = (
        f"Current insights:\n{numbered(insights)}\n\n"
        f"Failed attempt:\n{failing.text}\n\nSuccessful attempt:\n{succeeding.text}"
    )
    return [
        {"role": "system", "content": INSIGHTS_PROMPT.format(kind=_kind_words(kind))},
        {"role": "user", "content": user},
    ]


def model_operations(kind: str, failing: Trajectory, succeeding: Trajectory, insights: list[dict]) -> Written:
    """The model's operations, its call recorded (model, response format, tokens, duration); the
    rules' when the endpoint cannot be reached."""
    from feedback.agent.llm.formats import FormatError, json_completion

    model = settings.LLM_MODEL
    started = time.monotonic()
    call: dict = {"model": model}
    try:
        answer = json_completion(
            model=model,
            messages=_model_messages(kind, failing, succeeding, insights),
            schema=INSIGHTS_SCHEMA,
            name="insight_operations",
            temperature=0,
        )
    except (FormatError, LLMError) as exc:
        call |= {"duration_ms": round((time.monotonic() - started) * 1000), "error": str(exc)[:500]}
        if isinstance(exc, FormatError) and exc.refused:
            call["refused_formats"] = exc.refused
        return Written(rule_operations(kind, failing, succeeding, insights), writer="rules", call=call)
    call |= {
        "duration_ms": round((time.monotonic() - started) * 1000),
        "response_format": answer.response_format,
        "tokens_in": answer.tokens_in,
        "tokens_out": answer.tokens_out,
        **({"refused_formats": answer.refused} if answer.refused else {}),
    }
    try:
        data = json.loads(answer.text)
    except ValueError as exc:
        return Written([], [Ignored(answer.text[:500], f"the reply is not JSON: {exc}")], writer="model", call=call)
    ops, ignored = parse_operations(data)
    return Written(ops, ignored, writer="model", call=call)


def _by_model() -> bool:
    return use_endpoint() and settings.STRATEGY_PROPOSAL_WRITER != "template"


def write(kind: str, failing: Run, succeeding: Run, insights: list[dict]) -> Written:
    """The operations for one pair (runs with their tasks loaded), with those that quote the
    evidence moved to the ignored."""
    seen, good = trajectory(failing), trajectory(succeeding)
    if _by_model():
        written = model_operations(kind, seen, good, insights)
    else:
        written = Written(rule_operations(kind, seen, good, insights))
    found = secrets([failing.pk, succeeding.pk])
    kept = []
    for op in written.operations:
        quoted = leaks(op.text, found) if op.text else []
        if quoted:
            written.ignored.append(Ignored(op, f"it quotes the evidence ({len(quoted)} item(s))"))
        else:
            kept.append(op)
    written.operations = kept
    return written
