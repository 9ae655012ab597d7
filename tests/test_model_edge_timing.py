"""Every model call is a timed step: its start, duration, tokens and attempts on the step its turn
begins with, shown in the trace's waterfall and exported as the chat span's own times, so the
spans nest in time. Through the loop on the local OpenAI-compatible server (the real openai SDK)
and the tests' OTLP receiver (real protobuf over real HTTP)."""

import re
from datetime import timedelta
from itertools import pairwise

import pytest
from django.urls import reverse
from django.utils import timezone

from feedback import otel_export
from feedback.agent.loop import execute_run
from feedback.models import Run, Step

from .factories import make_run
from .fake_openai import call, completion, error
from .test_otel_export import receiver  # noqa: F401 (the fixture)

pytestmark = pytest.mark.django_db
MODEL_STEPS = (Step.Kind.THOUGHT, Step.Kind.FINAL, Step.Kind.MODEL_ERROR)
DELAY = 0.15  # seconds the server takes to answer each model call


def slow(reply: dict) -> dict:
    return {"json": reply, "delay": DELAY}


def a_run_of_three_model_calls(endpoint) -> Run:
    """A tool-only reply (no text), a 503 then a reply, then the answer: three model calls."""
    endpoint.script = [
        slow(completion(tool_calls=[call("calculator", {"expression": "2 + 2"})], usage=(50, 9))),
        {**error(503, "busy"), "delay": DELAY},
        slow(completion("Checking.", [call("calculator", {"expression": "4 * 1"})], usage=(70, 8))),
        slow(completion("2 + 2 = 4", usage=(90, 6))),
    ]
    run = make_run(text="What is 2 + 2?")
    execute_run(run.pk)
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED and run.final_output == "2 + 2 = 4"
    return run


def test_every_model_call_is_a_step_with_its_start_duration_tokens_and_attempts(endpoint):
    run = a_run_of_three_model_calls(endpoint)
    steps = list(run.steps.order_by("index"))
    calls = [s for s in steps if s.kind in MODEL_STEPS]
    assert [(s.kind, s.turn) for s in calls] == [("thought", 1), ("thought", 2), ("final", 3)]
    for step in calls:
        assert step.started_at and step.finished_at and step.duration_ms is not None
        assert step.duration_ms >= DELAY * 1000  # the server's answer was waited for
        assert step.duration_ms == int((step.finished_at - step.started_at).total_seconds() * 1000)
    assert [(s.tokens_in, s.tokens_out) for s in calls] == [(50, 9), (70, 8), (90, 6)]
    assert all(s.tokens_in == 0 for s in steps if s.kind == Step.Kind.TOOL_CALL)
    # The retried call: both attempts, and its duration holds them and the wait between them.
    retried = calls[1]
    assert retried.attempts == 2
    first, second = retried.attempt_rows.order_by("number")
    assert (first.retryable, "(503)" in first.error, second.error) == (True, True, "")
    assert retried.started_at <= first.started_at < second.started_at <= retried.finished_at
    assert retried.duration_ms >= 2 * DELAY * 1000
    # On one time axis: each step after the one before it.
    timed = [s for s in steps if s.started_at]
    assert all(a.started_at <= b.started_at for a, b in pairwise(timed))
    assert all(a.finished_at <= b.started_at for a, b in pairwise(calls))


def test_the_waterfall_draws_each_model_call(client, operator, endpoint):
    run = a_run_of_three_model_calls(endpoint)
    client.force_login(operator)
    html = client.get(reverse("feedback-run-detail", args=[run.pk])).content.decode()
    bar = r'id="run-\d+-step-(\d+)".*?<span class="bar[^"]*" data-at="\d+" data-ms="(\d+)"'
    bars = dict(re.findall(bar, html, re.S))
    for step in run.steps.filter(kind__in=MODEL_STEPS):
        assert int(bars[str(step.index)]) == step.duration_ms > 0
    thought = run.steps.get(turn=1, kind=Step.Kind.THOUGHT)
    head = html.split(f'id="run-{run.pk}-step-{thought.index}"')[1].split("</div>")[0]
    assert "Model call" in head and f"{thought.duration_ms} ms" in head  # a reply of tool calls alone


def test_exported_model_calls_carry_their_recorded_times_and_nest_in_the_run(receiver, endpoint):  # noqa: F811
    run = a_run_of_three_model_calls(endpoint)
    otel_export.run_trace_export(run_id=run.pk)
    spans = receiver.spans
    [root] = [s for s in spans if s.name.startswith("invoke_agent")]
    chats = sorted((s for s in spans if s.name.startswith("chat")), key=lambda s: s.attributes["agent_feedback.turn"])
    recorded = list(run.steps.filter(kind__in=MODEL_STEPS).order_by("index"))
    assert [(c.start, c.end) for c in chats] == [
        (otel_export._nanos(s.started_at), otel_export._nanos(s.finished_at)) for s in recorded
    ]
    assert [c.attributes["gen_ai.usage.input_tokens"] for c in chats] == [50, 70, 90]
    tools = sorted((s for s in spans if s.name.startswith("execute_tool")), key=lambda s: s.start)
    assert chats[0].end <= tools[0].start and tools[0].end <= chats[1].start
    assert all(root.start <= s.start <= s.end <= root.end for s in spans if s is not root)


def test_model_calls_back_to_back_nest_within_the_run(receiver):  # noqa: F811
    # Three model errors in a row within two microseconds (a fast endpoint, a coarse clock): sharing
    # the run's time out between them put the last one after the run's end.
    start = timezone.now().replace(microsecond=10)
    run = make_run(
        status=Run.Status.FAILED,
        started_at=start,
        finished_at=start + timedelta(microseconds=2),
        error="The model gave 3 unusable replies in a row.",
    )
    Run.objects.filter(pk=run.pk).update(llm_backend="openai", model_name="test-model")
    for turn in (1, 2, 3):
        at = start + timedelta(microseconds=turn - 1)
        Step.objects.create(
            run=run,
            index=turn - 1,
            turn=turn,
            kind=Step.Kind.MODEL_ERROR,
            success=False,
            error_class="EmptyReply",
            error="Your last reply was empty.",
            started_at=at,
            finished_at=at,
            duration_ms=0,
        )
    otel_export.run_trace_export(run_id=run.pk)
    [root] = [s for s in receiver.spans if s.name.startswith("invoke_agent")]
    chats = [s for s in receiver.spans if s.name.startswith("chat")]
    assert len(chats) == 3
    assert all(root.start <= c.start <= c.end <= root.end for c in chats)
