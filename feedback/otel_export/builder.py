"""A run's spans, built with the SDK from its steps, attempts, confirmations and evaluations, and
the spans that carry the evaluations given after its export (a reviewer's score, a new round).
Here: which spans there are, where they hang and when they start and end; what each one says (its
attributes and events) is attributes.py's."""

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

from feedback.models import Evaluation, Run, Step

from .attributes import (
    MODEL_STEPS,
    Event,
    attempt_events,
    chat_attributes,
    evaluation_result,
    evaluator_attributes,
    model_attributes,
    reflection_events,
    run_attributes,
    tool_attributes,
)
from .config import _LENGTH_LIMIT_VARIABLES, CONTENT_MAX_CHARS, SCOPE, capture_content
from .errors import ExportNotReady
from .ids import _RecordedIds, span_id_of, trace_id_of
from .values import _attributes, _nanos, _run_error


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
        self.model = model_attributes(run)

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
        events: Iterable[Event] = (),
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
            attributes=run_attributes(run, model=self.model, content=self.content),
            events=[*self._evaluation_events(), *reflection_events(steps, reflected, content=self.content)],
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
            result = evaluation_result(e, content=self.content)
            failed = e.status == Evaluation.Status.FAILED
            self._span(
                f"evaluation:{e.pk}",
                f"evaluation {e.evaluator}",
                parent=target,
                kind=SpanKind.INTERNAL,
                start=e.created_at,
                end=e.created_at,
                attributes=evaluator_attributes(run, e, result),
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
            called = [s for s in steps if s.kind in MODEL_STEPS and s.started_at and s.finished_at]
            if called:
                windows[turn] = (min(s.started_at for s in called), max(s.finished_at for s in called))
            else:
                windows[turn] = (cursor, cursor)
            moments = [m for s in steps for m in (s.started_at, s.finished_at) if m]
            cursor = over[turn] = max([cursor, windows[turn][1], *moments])
        return windows, over

    def _evaluation_events(self) -> Iterable[Event]:
        """The run's first automatic round (the one its export follows), as gen_ai.evaluation.result.
        A person's score and any later round are sent on spans of their own (evaluation_spans):
        nothing given after the export needs the run's spans sent again."""
        automatic = list(
            Evaluation.objects.filter(run=self.run).exclude(kind=Evaluation.Kind.HUMAN).order_by("round", "pk")
        )
        for e in automatic:
            if e.round != automatic[0].round:
                break
            yield "gen_ai.evaluation.result", evaluation_result(e, content=self.content), e.created_at

    def _chat_span(self, root: SpanContext, turn: int, steps: list[Step], window: tuple[datetime, datetime]) -> None:
        """The model call that began the turn: its step (a thought, the answer or a model error),
        with its own times, tokens and attempts."""
        run = self.run
        replies = [s for s in steps if s.kind in MODEL_STEPS]
        failed = next((s for s in replies if s.kind == Step.Kind.MODEL_ERROR), None)
        self._span(
            f"chat:{run.pk}:{turn}",
            f"chat {run.model_name}".strip(),
            parent=root,
            kind=SpanKind.CLIENT if run.llm_backend == "openai" else SpanKind.INTERNAL,
            start=window[0],
            end=window[1],
            attributes=chat_attributes(run, turn, steps, model=self.model, content=self.content),
            events=[e for s in replies for e in attempt_events(s, content=self.content)],
            error=(failed.error_class or "_OTHER") if failed else "",
            error_message=failed.error if failed else "",
        )

    def _tool_span(self, root: SpanContext, step: Step, called_at: datetime, confirmation: str | None) -> None:
        start = step.started_at or called_at
        self._span(
            f"step:{step.pk}",
            f"execute_tool {step.tool_name}",
            parent=root,
            kind=SpanKind.INTERNAL,
            start=start,
            end=step.finished_at or start,
            attributes=tool_attributes(self.run, step, confirmation, content=self.content),
            events=attempt_events(step, content=self.content),
            error=(step.error_class or "_OTHER") if step.success is False else "",
            error_message=step.error,
        )
