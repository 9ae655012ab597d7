"""A run's spans, built with the SDK from its steps, attempts, confirmations and evaluations, and
the spans that carry the evaluations given after its export (a reviewer's score, a new round)."""

import os
from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.conf import settings
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from feedback.models import AppliedStrategy, Evaluation, Run, Step
from feedback.models.evaluation import OFFLINE_JUDGE_NAME

from .config import _LENGTH_LIMIT_VARIABLES, CONTENT_MAX_CHARS, NS, SCOPE, capture_content
from .errors import ExportNotReady
from .ids import _RecordedIds, span_id_of, trace_id_of
from .values import _attributes, _json, _nanos, _run_error

_MODEL_STEPS = (Step.Kind.THOUGHT, Step.Kind.FINAL, Step.Kind.MODEL_ERROR)
# gen_ai.provider.name by the run's llm_backend; any other backend is named as it is.
_PROVIDERS = {"openai": "openai", "offline": "offline_demo"}


def run_spans(run: Run) -> list[ReadableSpan]:
    """The run's spans, built with the SDK from what the run recorded."""
    return _TraceBuilder(run, content=capture_content()).build()


def evaluation_spans(run: Run, evaluations: Iterable[Evaluation]) -> list[ReadableSpan]:
    """One EVALUATOR span per evaluation of ``run`` given after its trace was sent, each with an
    id of its own, under the run's span in the run's trace and linked to it.

    Backends keep the first copy of a span (Phoenix inserts spans with ON CONFLICT DO NOTHING),
    so sending the run's spans again with a later score changes nothing there; OpenInference says
    the same of any ended span ("Feedback obtained after the target span has ended MUST NOT be
    added by mutating or re-exporting the original span", spec/annotations.md): a new EVALUATOR
    span with ``evaluations.*`` and a link to its target carries it instead."""
    return _TraceBuilder(run, content=capture_content()).build_evaluations(list(evaluations))


def _top_run(run: Run) -> Run:
    """The run a sub-agent's run was delegated from, at the top (``run`` itself at the top)."""
    while run.parent_id is not None:
        run = run.parent
    return run


def _rerun_root(run: Run) -> Run:
    """The first run of the re-run chain ``run`` belongs to (``run`` itself if it is no re-run):
    every re-run of a run is in the session of the run first asked for."""
    seen = {run.pk}
    while run.retry_of_id is not None and run.retry_of_id not in seen:
        seen.add(run.retry_of_id)
        run = Run.objects.only("pk", "task_id", "retry_of_id").get(pk=run.retry_of_id)
    return run


def _annotator_kind(evaluation: Evaluation) -> str:
    """OpenInference's annotator kinds: a person, a language model, or code (the offline judge)."""
    if evaluation.kind == Evaluation.Kind.HUMAN:
        return "HUMAN"
    if evaluation.kind == Evaluation.Kind.JUDGE and evaluation.evaluator != OFFLINE_JUDGE_NAME:
        return "LLM"
    return "CODE"


class _TraceBuilder:
    def __init__(self, run: Run, *, content: bool) -> None:
        self.run = run
        self.content = content
        self.ids = _RecordedIds()
        self.collected = InMemorySpanExporter()
        length = None if any(os.environ.get(v) for v in _LENGTH_LIMIT_VARIABLES) else CONTENT_MAX_CHARS
        provider = TracerProvider(
            # Every ended run is sent whole; sampling, if any, belongs to a collector.
            sampler=ALWAYS_ON,
            resource=Resource.create({"service.name": settings.OTEL_SERVICE_NAME}),
            id_generator=self.ids,
            span_limits=SpanLimits(max_attribute_length=length, max_span_attribute_length=length),
            shutdown_on_exit=False,
        )
        provider.add_span_processor(SimpleSpanProcessor(self.collected))
        self.tracer = provider.get_tracer(SCOPE)
        provider_name = _PROVIDERS.get(run.llm_backend, run.llm_backend or "_OTHER")
        self.model = {
            "gen_ai.provider.name": provider_name,
            # The older name, still the one some backends read.
            "gen_ai.system": provider_name,
            "gen_ai.request.model": run.model_name or None,
            "gen_ai.conversation.id": str(run.pk),
        }

    # The SDK pipeline: the ids come from _RecordedIds, the times from the record.
    def _span(
        self,
        key: str,
        name: str,
        *,
        parent: SpanContext | None,
        kind: SpanKind,
        start: datetime,
        end: datetime,
        attributes: dict[str, Any],
        events: Iterable[tuple[str, dict[str, Any], datetime]] = (),
        error: str = "",
        error_message: str = "",
        links: Iterable[SpanContext] = (),
    ) -> SpanContext:
        self.ids.span_id = span_id_of(key)
        context = trace.set_span_in_context(trace.NonRecordingSpan(parent)) if parent else Context()
        span = self.tracer.start_span(
            name,
            context=context,
            kind=kind,
            attributes=_attributes(attributes),
            links=[Link(target) for target in links],
            start_time=_nanos(start),
        )
        for event, values, moment in events:
            span.add_event(event, _attributes(values), timestamp=_nanos(moment))
        if error:
            span.set_attribute("error.type", error)
            span.set_status(Status(StatusCode.ERROR, error_message if self.content and error_message else error))
        span.end(end_time=_nanos(max(start, end)))
        return span.get_span_context()

    def build(self) -> list[ReadableSpan]:
        run = self.run
        self.ids.trace_id, parent = self._placement()
        steps = list(run.steps.order_by("index").prefetch_related("attempt_rows"))
        turns: dict[int, list[Step]] = defaultdict(list)
        for step in steps:
            turns[step.turn].append(step)
        windows, reflected = self._timeline(turns)

        start = run.started_at or run.created_at
        ends = [s.finished_at for s in steps if s.finished_at]
        end = run.finished_at or max(ends, default=start)
        root = self._span(
            f"run:{run.pk}",
            f"invoke_agent {run.task_kind}",
            parent=parent,
            kind=SpanKind.INTERNAL,
            start=start,
            end=end,
            attributes=self._run_attributes(steps),
            events=[*self._evaluation_events(), *self._reflection_events(steps, reflected)],
            error=_run_error(run),
            error_message=run.error,
        )
        confirmations = dict(run.confirmations.values_list("tool_call_id", "status"))
        for turn, turn_steps in turns.items():
            self._chat_span(root, turn, turn_steps, windows[turn])
            for step in turn_steps:
                if step.kind == Step.Kind.TOOL_CALL:
                    self._tool_span(root, step, windows[turn][1], confirmations.get(step.tool_call_id))
        return list(self.collected.get_finished_spans())

    def build_evaluations(self, evaluations: list[Evaluation]) -> list[ReadableSpan]:
        run = self.run
        self.ids.trace_id = trace_id_of(_top_run(run).pk)
        flags = TraceFlags(TraceFlags.SAMPLED)
        # The run's span, by its derived id: it need not be sent again, nor even have arrived yet.
        target = SpanContext(self.ids.trace_id, span_id_of(f"run:{run.pk}"), is_remote=False, trace_flags=flags)
        for e in evaluations:
            result = self._evaluation_result(e)
            failed = e.status == Evaluation.Status.FAILED
            values = {
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
            self._span(
                f"evaluation:{e.pk}",
                f"evaluation {e.evaluator}",
                parent=target,
                kind=SpanKind.INTERNAL,
                start=e.created_at,
                end=e.created_at,
                attributes=values,
                events=[("gen_ai.evaluation.result", result, e.created_at)],
                error="evaluator_failed" if failed else "",
                links=[target],
            )
        return list(self.collected.get_finished_spans())

    def _placement(self) -> tuple[int, SpanContext | None]:
        """The trace the run belongs to, and the span its own hangs from: a sub-agent's run is
        part of its parent's trace, under the span of the delegate call that started it."""
        run = self.run
        if run.parent_id is None:
            return trace_id_of(run.pk), None
        trace_id = trace_id_of(_top_run(run).pk)
        if run.parent_step_id is not None:
            parent_span = span_id_of(f"step:{run.parent_step_id}")
        elif Run.objects.filter(pk=run.parent_id, status__in=Run.ACTIVE_STATUSES).exists():
            # The parent records its delegate call just after this run ends.
            raise ExportNotReady(f"run {run.pk}'s delegate call is not recorded yet")
        else:
            parent_span = span_id_of(f"run:{run.parent_id}")  # the call was never recorded
        return trace_id, SpanContext(trace_id, parent_span, is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED))

    def _timeline(
        self, turns: dict[int, list[Step]]
    ) -> tuple[dict[int, tuple[datetime, datetime]], dict[int, datetime]]:
        """Each turn's model call as its step recorded it, and when each turn was over. A turn
        recorded before model calls were timed gets a model call of no length at the last moment
        known before it: nothing is made up."""
        windows: dict[int, tuple[datetime, datetime]] = {}
        over: dict[int, datetime] = {}
        cursor = self.run.started_at or self.run.created_at
        for turn, steps in turns.items():
            called = [s for s in steps if s.kind in _MODEL_STEPS and s.started_at and s.finished_at]
            if called:
                windows[turn] = (min(s.started_at for s in called), max(s.finished_at for s in called))
            else:
                windows[turn] = (cursor, cursor)
            moments = [m for s in steps for m in (s.started_at, s.finished_at) if m]
            cursor = over[turn] = max([cursor, windows[turn][1], *moments])
        return windows, over

    def _run_attributes(self, steps: list[Step]) -> dict[str, Any]:
        run = self.run
        applied = list(
            AppliedStrategy.objects.filter(run=run)
            .order_by("pk")
            .values_list("strategy_version__strategy_id", "strategy_version__number", "arm")
        )
        trial = [(strategy, arm) for strategy, _, arm in applied if arm != AppliedStrategy.Arm.ACTIVE]
        top = run.parent_id is None
        values = {
            **self.model,
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
        if self.content:
            values |= {
                "input.value": run.task.text,
                "output.value": run.final_output,
                "gen_ai.system_instructions": _json([{"type": "text", "content": run.system_prompt}])
                if run.system_prompt
                else None,
            }
        return values

    def _evaluation_events(self) -> Iterable[tuple[str, dict[str, Any], datetime]]:
        """The run's first automatic round (the one its export follows), as gen_ai.evaluation.result.
        A person's score and any later round are sent on spans of their own (evaluation_spans):
        nothing given after the export needs the run's spans sent again."""
        automatic = list(
            Evaluation.objects.filter(run=self.run).exclude(kind=Evaluation.Kind.HUMAN).order_by("round", "pk")
        )
        for e in automatic:
            if e.round != automatic[0].round:
                break
            yield "gen_ai.evaluation.result", self._evaluation_result(e), e.created_at

    def _evaluation_result(self, e: Evaluation) -> dict[str, Any]:
        failed = e.status == Evaluation.Status.FAILED
        label = {True: "accomplished", False: "not_accomplished", None: None}[e.accomplished]
        return {
            "gen_ai.evaluation.name": e.evaluator,
            "gen_ai.evaluation.score.value": e.score,
            "gen_ai.evaluation.score.label": "failed" if failed else label,
            "gen_ai.evaluation.explanation": e.feedback if self.content else None,
            "error.type": "evaluator_failed" if failed else None,
            NS + "evaluation.kind": e.kind,
            NS + "evaluation.round": e.round,
            NS + "evaluation.weight": e.weight,
        }

    def _reflection_events(
        self, steps: list[Step], over: dict[int, datetime]
    ) -> Iterable[tuple[str, dict[str, Any], datetime]]:
        for step in steps:
            if step.kind == Step.Kind.REFLECTION:
                values = {NS + "step.index": step.index, NS + "reflection": step.thought if self.content else None}
                yield NS + "reflection", values, over[step.turn]

    def _attempt_events(self, step: Step) -> list[tuple[str, dict[str, Any], datetime]]:
        return [
            (
                NS + "attempt",
                {
                    NS + "attempt.number": a.number,
                    NS + "attempt.duration_ms": a.duration_ms,
                    NS + "attempt.retryable": a.retryable,
                    "error.type": a.error_class or None,
                    "exception.message": a.error if self.content else None,
                },
                a.started_at,
            )
            for a in step.attempt_rows.all()
        ]

    def _chat_span(self, root: SpanContext, turn: int, steps: list[Step], window: tuple[datetime, datetime]) -> None:
        """The model call that began the turn: its step (a thought, the answer or a model error),
        with its own times, tokens and attempts. (Turns recorded before every model call had a step
        carry their tokens on their first tool call: summing the turn's steps counts them too.)"""
        run = self.run
        replies = [s for s in steps if s.kind in _MODEL_STEPS]
        calls = [s for s in steps if s.kind == Step.Kind.TOOL_CALL]
        failed = next((s for s in replies if s.kind == Step.Kind.MODEL_ERROR), None)
        tokens_in = sum(s.tokens_in for s in steps) if steps else None
        tokens_out = sum(s.tokens_out for s in steps) if steps else None
        values = {
            **self.model,
            "gen_ai.operation.name": "chat",
            "gen_ai.usage.input_tokens": tokens_in,
            "gen_ai.usage.output_tokens": tokens_out,
            "openinference.span.kind": "LLM",
            "langfuse.observation.type": "generation",
            "llm.model_name": run.model_name or None,
            "llm.provider": self.model["gen_ai.provider.name"],
            "llm.token_count.prompt": tokens_in,
            "llm.token_count.completion": tokens_out,
            "llm.token_count.total": tokens_in + tokens_out if steps else None,
            NS + "turn": turn,
            NS + "step.index": replies[0].index if replies else None,
        }
        if self.content and not failed:
            text = "\n".join(s.thought for s in replies if s.thought)
            parts = [{"type": "text", "content": text}] if text else []
            parts += [
                {"type": "tool_call", "id": c.tool_call_id, "name": c.tool_name, "arguments": c.arguments}
                for c in calls
            ]
            finish = "tool_call" if calls else "stop"
            values |= {
                "gen_ai.output.messages": _json([{"role": "assistant", "parts": parts, "finish_reason": finish}]),
                "output.value": text,
            }
        self._span(
            f"chat:{run.pk}:{turn}",
            f"chat {run.model_name}".strip(),
            parent=root,
            kind=SpanKind.CLIENT if run.llm_backend == "openai" else SpanKind.INTERNAL,
            start=window[0],
            end=window[1],
            attributes=values,
            events=[e for s in replies for e in self._attempt_events(s)],
            error=(failed.error_class or "_OTHER") if failed else "",
            error_message=failed.error if failed else "",
        )

    def _tool_span(self, root: SpanContext, step: Step, called_at: datetime, confirmation: str | None) -> None:
        start = step.started_at or called_at
        values = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": step.tool_name,
            "gen_ai.tool.call.id": step.tool_call_id,
            "gen_ai.tool.type": "function",
            "gen_ai.conversation.id": str(self.run.pk),
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
        if self.content:
            arguments = _json(step.arguments) if step.arguments is not None else None
            result = _json(step.result) if step.success and step.result is not None else None
            values |= {
                "gen_ai.tool.call.arguments": arguments,
                "gen_ai.tool.call.result": result,
                "input.value": arguments,
                "output.value": result if step.success else step.error,
            }
        self._span(
            f"step:{step.pk}",
            f"execute_tool {step.tool_name}",
            parent=root,
            kind=SpanKind.INTERNAL,
            start=start,
            end=step.finished_at or start,
            attributes=values,
            events=self._attempt_events(step),
            error=(step.error_class or "_OTHER") if step.success is False else "",
            error_message=step.error,
        )
