"""What each span of a run says: its attributes and events, in the OpenTelemetry GenAI conventions,
beside the names OpenInference (Phoenix) and Langfuse read, and ours under ``NS``. Content (prompts,
answers, arguments, results, feedback) only when ``content`` is on (config.capture_content)."""

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from feedback.models import AppliedStrategy, Evaluation, Run, Step
from feedback.models.evaluation import OFFLINE_JUDGE_NAME

from .config import NS
from .values import _json

Event = tuple[str, dict[str, Any], datetime]

MODEL_STEPS = (Step.Kind.THOUGHT, Step.Kind.FINAL, Step.Kind.MODEL_ERROR)
# gen_ai.provider.name by the run's llm_backend; any other backend is named as it is.
_PROVIDERS = {"openai": "openai", "offline": "offline_demo"}


def model_attributes(run: Run) -> dict[str, Any]:
    """The model the run asked, as every span that speaks of it names it."""
    provider_name = _PROVIDERS.get(run.llm_backend, run.llm_backend or "_OTHER")
    return {
        "gen_ai.provider.name": provider_name,
        # The older name, still the one some backends read.
        "gen_ai.system": provider_name,
        "gen_ai.request.model": run.model_name or None,
        "gen_ai.conversation.id": str(run.pk),
    }


def _rerun_root(run: Run) -> Run:
    """The first run of the re-run chain ``run`` belongs to (``run`` itself if it is no re-run):
    every re-run of a run is in the session of the run first asked for."""
    seen = {run.pk}
    while run.retry_of_id is not None and run.retry_of_id not in seen:
        seen.add(run.retry_of_id)
        run = Run.objects.only("pk", "task_id", "retry_of_id").get(pk=run.retry_of_id)
    return run


def run_attributes(run: Run, *, model: dict[str, Any], content: bool) -> dict[str, Any]:
    """The run's own span (invoke_agent): what it was, how it ended, the strategies it was given."""
    applied = list(
        AppliedStrategy.objects.filter(run=run)
        .order_by("pk")
        .values_list("strategy_version__strategy_id", "strategy_version__number", "arm")
    )
    trial = [(strategy, arm) for strategy, _, arm in applied if arm != AppliedStrategy.Arm.ACTIVE]
    top = run.parent_id is None
    values = {
        **model,
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": run.task_kind,
        # Trace-level for Langfuse and Phoenix: set by the top run only, for its whole trace;
        # a re-run is in the session of the run it re-runs (the first of its chain).
        "session.id": f"task-{_rerun_root(run).task_id}" if top else None,
        "user.id": str(run.task.created_by_id) if top and run.task.created_by_id else None,
        "openinference.span.kind": "AGENT",
        "langfuse.observation.type": "agent",
        NS + "run.id": run.pk,
        NS + "run.status": run.status,
        NS + "run.outcome": run.outcome,
        NS + "run.score": run.score,
        NS + "run.step_count": run.step_count,
        NS + "run.input_tokens": run.tokens_in,
        NS + "run.output_tokens": run.tokens_out,
        NS + "run.parent_id": run.parent_id,
        NS + "run.retry_of": run.retry_of_id,
        NS + "run.tool_selection": run.tool_selection,
        NS + "run.tools_offered": [str(t) for t in run.tools_offered or []],
        NS + "task.id": run.task_id,
        NS + "task.kind": run.task_kind,
        NS + "strategy.ids": [strategy for strategy, _, _ in applied],
        NS + "strategy.versions": [number for _, number, _ in applied],
        NS + "strategy.arms": [arm for _, _, arm in applied],
        # A run takes part in one trial at most (strategies/injection.py).
        NS + "trial.strategy_id": trial[0][0] if trial else None,
        NS + "trial.arm": trial[0][1] if trial else None,
    }
    if content:
        values |= {
            "input.value": run.task.text,
            "output.value": run.final_output,
            "gen_ai.system_instructions": _json([{"type": "text", "content": run.system_prompt}])
            if run.system_prompt
            else None,
        }
    return values


def evaluation_result(e: Evaluation, *, content: bool) -> dict[str, Any]:
    """An evaluation as a gen_ai.evaluation.result event says it (and its EVALUATOR span too)."""
    failed = e.status == Evaluation.Status.FAILED
    label = {True: "accomplished", False: "not_accomplished", None: None}[e.accomplished]
    return {
        "gen_ai.evaluation.name": e.evaluator,
        "gen_ai.evaluation.score.value": e.score,
        "gen_ai.evaluation.score.label": "failed" if failed else label,
        "gen_ai.evaluation.explanation": e.feedback if content else None,
        "error.type": "evaluator_failed" if failed else None,
        NS + "evaluation.kind": e.kind,
        NS + "evaluation.round": e.round,
        NS + "evaluation.weight": e.weight,
    }


def _annotator_kind(evaluation: Evaluation) -> str:
    """OpenInference's annotator kinds: a person, a language model, or code (the offline judge)."""
    if evaluation.kind == Evaluation.Kind.HUMAN:
        return "HUMAN"
    if evaluation.kind == Evaluation.Kind.JUDGE and evaluation.evaluator != OFFLINE_JUDGE_NAME:
        return "LLM"
    return "CODE"


def evaluator_attributes(run: Run, e: Evaluation, result: dict[str, Any]) -> dict[str, Any]:
    """An EVALUATOR span's, for an evaluation given after the run's export; ``result``: its
    evaluation_result."""
    return {
        "gen_ai.conversation.id": str(run.pk),
        "openinference.span.kind": "EVALUATOR",
        "langfuse.observation.type": "evaluator",
        # OpenInference's evaluations.* (Phoenix): one result per span, about its link's target.
        "evaluations.0.evaluation.name": e.evaluator,
        "evaluations.0.evaluation.score": e.score,
        "evaluations.0.evaluation.label": result["gen_ai.evaluation.score.label"],
        "evaluations.0.evaluation.explanation": result["gen_ai.evaluation.explanation"],
        "evaluations.0.evaluation.annotator_kind": _annotator_kind(e),
        # Results of one name on one target told apart (two reviewers' scores), stably.
        "evaluations.0.evaluation.identifier": f"evaluation-{e.pk}",
        "evaluations.0.evaluation.metadata": _json({"kind": e.kind, "round": e.round, "weight": e.weight}),
        NS + "run.id": run.pk,
        **result,
    }


def reflection_events(steps: list[Step], over: dict[int, datetime], *, content: bool) -> Iterable[Event]:
    """The run's reflections, each at the moment its turn was over."""
    for step in steps:
        if step.kind == Step.Kind.REFLECTION:
            values = {NS + "step.index": step.index, NS + "reflection": step.thought if content else None}
            yield NS + "reflection", values, over[step.turn]


def attempt_events(step: Step, *, content: bool) -> list[Event]:
    """One event per recorded attempt of the step's call (a model call's or a tool call's)."""
    return [
        (
            NS + "attempt",
            {
                NS + "attempt.number": a.number,
                NS + "attempt.duration_ms": a.duration_ms,
                NS + "attempt.retryable": a.retryable,
                "error.type": a.error_class or None,
                "exception.message": a.error if content else None,
            },
            a.started_at,
        )
        for a in step.attempt_rows.all()
    ]


def chat_attributes(run: Run, turn: int, steps: list[Step], *, model: dict[str, Any], content: bool) -> dict[str, Any]:
    """A turn's model call (chat): its tokens, and with content what it answered and called.
    (Turns recorded before every model call had a step carry their tokens on their first tool
    call: summing the turn's steps counts them too.)"""
    replies = [s for s in steps if s.kind in MODEL_STEPS]
    calls = [s for s in steps if s.kind == Step.Kind.TOOL_CALL]
    failed = any(s.kind == Step.Kind.MODEL_ERROR for s in replies)
    tokens_in = sum(s.tokens_in for s in steps) if steps else None
    tokens_out = sum(s.tokens_out for s in steps) if steps else None
    values = {
        **model,
        "gen_ai.operation.name": "chat",
        "gen_ai.usage.input_tokens": tokens_in,
        "gen_ai.usage.output_tokens": tokens_out,
        "openinference.span.kind": "LLM",
        "langfuse.observation.type": "generation",
        "llm.model_name": run.model_name or None,
        "llm.provider": model["gen_ai.provider.name"],
        "llm.token_count.prompt": tokens_in,
        "llm.token_count.completion": tokens_out,
        "llm.token_count.total": tokens_in + tokens_out if steps else None,
        NS + "turn": turn,
        NS + "step.index": replies[0].index if replies else None,
    }
    if content and not failed:
        text = "\n".join(s.thought for s in replies if s.thought)
        parts = [{"type": "text", "content": text}] if text else []
        parts += [
            {"type": "tool_call", "id": c.tool_call_id, "name": c.tool_name, "arguments": c.arguments} for c in calls
        ]
        finish = "tool_call" if calls else "stop"
        values |= {
            "gen_ai.output.messages": _json([{"role": "assistant", "parts": parts, "finish_reason": finish}]),
            "output.value": text,
        }
    return values


def tool_attributes(run: Run, step: Step, confirmation: str | None, *, content: bool) -> dict[str, Any]:
    """A tool call's span (execute_tool); ``confirmation``: the status of the person's decision on
    it, if it needed one."""
    values = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": step.tool_name,
        "gen_ai.tool.call.id": step.tool_call_id,
        "gen_ai.tool.type": "function",
        "gen_ai.conversation.id": str(run.pk),
        "openinference.span.kind": "TOOL",
        "langfuse.observation.type": "tool",
        "tool.name": step.tool_name,
        NS + "turn": step.turn,
        NS + "step.index": step.index,
        NS + "step.attempts": step.attempts,
        NS + "step.cached": step.cached,
        NS + "step.stale": step.stale or None,
        NS + "step.served_by": step.served_by,
        NS + "step.validation": step.validation_status,
        NS + "confirmation.status": confirmation,
    }
    if content:
        arguments = _json(step.arguments) if step.arguments is not None else None
        result = _json(step.result) if step.success and step.result is not None else None
        values |= {
            "gen_ai.tool.call.arguments": arguments,
            "gen_ai.tool.call.result": result,
            "input.value": arguments,
            "output.value": result if step.success else step.error,
        }
    return values
