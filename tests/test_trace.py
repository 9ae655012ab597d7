"""The run page's trace: paging, the waterfall, sub-agent runs, JSON, and staying fast."""

import json
import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from feedback.models import Run, Step, StepAttempt
from feedback.traces import TRACE_PAGE_SIZE

from .factories import make_run

pytestmark = pytest.mark.django_db
HTMX = {"HX-Request": "true"}


def _bulk_steps(run: Run, n: int) -> None:
    start = run.started_at
    Step.objects.bulk_create(
        Step(
            run=run,
            index=i,
            kind=Step.Kind.TOOL_CALL,
            tool_name="calculator",
            arguments={"expression": f"{i} + 1"},
            result={"value": i + 1},
            success=i % 500 != 7,
            error="boom" if i % 500 == 7 else "",
            started_at=start + timedelta(milliseconds=10 * i),
            duration_ms=8,
        )
        for i in range(n)
    )
    Run.objects.filter(pk=run.pk).update(step_count=n)


@pytest.fixture
def long_run(db):
    start = timezone.now() - timedelta(minutes=2)
    run = make_run(status=Run.Status.SUCCEEDED, started_at=start, finished_at=start + timedelta(seconds=50))
    _bulk_steps(run, 5000)
    return run


def test_a_run_of_5000_steps_renders_only_its_first_page(client, operator, long_run, django_assert_max_num_queries):
    client.force_login(operator)
    url = reverse("feedback-run-detail", args=[long_run.pk])
    # N+1 guarded: the trace page reads each step's attempts, child runs, confirmations and
    # evaluations once for the page, not once per step (100 here) nor per step that went wrong (10).
    with django_assert_max_num_queries(13):
        response = client.get(url)
    html = response.content.decode()
    assert html.count('class="step ') == TRACE_PAGE_SIZE
    assert len(response.content) < 150_000  # about 80 kB today
    assert f'?after={TRACE_PAGE_SIZE - 1}" hx-trigger="revealed"' in html
    assert "10 steps went wrong" in html  # found by query although most are not on this page


def test_each_further_page_costs_the_same_few_queries(client, operator, long_run, django_assert_max_num_queries):
    client.force_login(operator)
    url = reverse("feedback-run-steps", args=[long_run.pk])
    for after in (99, 2499, 4899):
        # N+1 guarded: a further page of steps costs the same few queries wherever it starts,
        # never one per step on the page.
        with django_assert_max_num_queries(12):
            html = client.get(url, {"after": after}, headers=HTMX).content.decode()
        assert html.count('class="step ') == min(TRACE_PAGE_SIZE, 4999 - after)
        assert f'id="run-{long_run.pk}-step-{after + 1}"' in html
    last = client.get(url, {"after": 4899}, headers=HTMX).content.decode()
    assert "trace-tail" not in last  # the end of an ended run: nothing more to load


def test_the_waterfall_places_steps_by_their_start_and_duration(client, operator):
    start = timezone.now() - timedelta(seconds=20)
    run = make_run(status=Run.Status.SUCCEEDED, started_at=start, finished_at=start + timedelta(seconds=10))
    Step.objects.create(run=run, index=0, kind=Step.Kind.THOUGHT, started_at=start, duration_ms=1000)
    Step.objects.create(run=run, index=1, kind=Step.Kind.TOOL_CALL, started_at=start + timedelta(seconds=5),
                        duration_ms=2500, tool_name="calculator")  # fmt: skip
    # Written by a worker whose clock is a little behind; and one with no times at all.
    Step.objects.create(run=run, index=2, kind=Step.Kind.THOUGHT, started_at=start - timedelta(milliseconds=30))
    Step.objects.create(run=run, index=3, kind=Step.Kind.FINAL, started_at=None, duration_ms=None)
    client.force_login(operator)
    html = client.get(reverse("feedback-run-detail", args=[run.pk])).content.decode()
    # Each bar holds its step's own times (ms from the run's start); the trace, the run's span.
    assert f'<span hidden id="trace-scale-{run.pk}" data-trace="trace-{run.pk}" data-span="10000"></span>' in html
    bars = re.findall(r'id="run-\d+-step-(\d)".*?<span class="bar" data-at="(\d+)" data-ms="(\d+)"', html, re.S)
    assert bars == [("0", "0", "1000"), ("1", "5000", "2500"), ("2", "0", "0"), ("3", "0", "0")]


def test_errors_attempts_and_failed_validation_stand_out(client, operator):
    run = make_run(status=Run.Status.FAILED, error="Step limit")
    step = Step.objects.create(
        run=run, index=0, kind=Step.Kind.TOOL_CALL, tool_name="http_get", success=False, attempts=2,
        error="timed out", error_class="ToolTimeout", error_signature="ab12cd34ef",
        validation_status=Step.Validation.FAIL,
        validation={"checks": [{"rule": "json_schema", "ok": False, "hard": True, "message": "missing <key>"}]},
    )  # fmt: skip
    StepAttempt.objects.create(step=step, number=1, started_at=timezone.now(), duration_ms=5, error="slow",
                               error_class="ToolTimeout", retryable=True)  # fmt: skip
    client.force_login(operator)
    html = client.get(reverse("feedback-run-detail", args=[run.pk])).content.decode()
    assert 'class="step kind-tool_call failed"' in html
    assert "1 step went wrong" in html and f'href="#run-{run.pk}-step-0"' in html
    assert "missing &lt;key&gt;" in html and "attempt 1 (5 ms)" in html
    assert "?error=ab12cd34ef" in html  # the error signature links to the runs that share it


def test_long_payloads_start_clamped_with_show_all(client, operator):
    run = make_run(status=Run.Status.SUCCEEDED)
    Step.objects.create(run=run, index=0, kind=Step.Kind.TOOL_CALL, tool_name="read_text_file",
                        result={"text": "<b>x</b>" * 1000})  # fmt: skip
    client.force_login(operator)
    html = client.get(reverse("feedback-run-detail", args=[run.pk])).content.decode()
    assert 'class="payload clamp"' in html and "data-show-all" in html
    assert "<b>x</b>" not in html and "&lt;b&gt;x&lt;/b&gt;" in html


def test_a_sub_agent_run_expands_in_place(client, operator):
    parent = make_run(status=Run.Status.SUCCEEDED, text="Ask a helper")
    delegate = Step.objects.create(run=parent, index=0, kind=Step.Kind.TOOL_CALL, tool_name="delegate", success=True)
    child = make_run(status=Run.Status.SUCCEEDED, text="What is <6> * 7?", parent=parent, parent_step=delegate)
    Step.objects.create(run=child, index=0, kind=Step.Kind.FINAL, thought="6 * 7 = 42")
    client.force_login(operator)
    html = client.get(reverse("feedback-run-detail", args=[parent.pk])).content.decode()
    assert f'id="child-slot-{child.pk}"' in html
    assert f'href="/runs/{child.pk}/" hx-get="/runs/{child.pk}/child/"' in html
    fragment = client.get(reverse("feedback-run-child", args=[child.pk]), headers=HTMX)
    text = fragment.content.decode()
    assert text.lstrip().startswith(f'<div class="child-run" id="child-run-{child.pk}"')
    assert f'id="run-{child.pk}-step-0"' in text and "6 * 7 = 42" in text
    assert "What is &lt;6&gt; * 7?" in text
    assert 'id="run-status"' not in text  # nested: no clash with the parent's ids


def test_the_whole_trace_downloads_as_json(client, operator, long_run, django_assert_max_num_queries):
    client.force_login(operator)
    url = reverse("feedback-run-trace-json", args=[long_run.pk])
    # N+1 guarded: the download streams 5,000 steps in chunks, not a query (or two) per step.
    with django_assert_max_num_queries(60):
        response = client.get(url)
        body = b"".join(response.streaming_content)
    assert response["Content-Disposition"] == f'attachment; filename="run-{long_run.pk}-trace.json"'
    trace = json.loads(body)
    assert trace["id"] == long_run.pk and trace["status"] == "succeeded"
    assert [s["index"] for s in trace["steps"]] == list(range(5000))
    assert trace["steps"][7]["error"] == "boom" and trace["steps"][7]["attempts"] == []


def test_one_step_as_json_for_copying(client, operator):
    run = make_run(status=Run.Status.SUCCEEDED)
    step = Step.objects.create(run=run, index=3, kind=Step.Kind.TOOL_CALL, tool_name="calculator",
                               arguments={"expression": "1 + 1"}, result={"value": 2})  # fmt: skip
    StepAttempt.objects.create(step=step, number=1, started_at=timezone.now(), duration_ms=4)
    client.force_login(operator)
    url = reverse("feedback-run-trace-json", args=[run.pk])
    data = client.get(url, {"step": 3}).json()
    assert data["arguments"] == {"expression": "1 + 1"} and data["attempts"][0]["duration_ms"] == 4
    assert client.get(url, {"step": 4}).status_code == 404
    html = client.get(reverse("feedback-run-detail", args=[run.pk])).content.decode()
    assert f'href="{url}?step=3" data-copy-json' in html


def test_applied_strategies_and_the_system_prompt_are_shown(client, operator):
    from feedback.models import AppliedStrategy, Strategy, StrategyVersion

    run = make_run(status=Run.Status.SUCCEEDED, system_prompt="You are <careful>.", tokens_in=120, tokens_out=30)
    strategy = Strategy.objects.create(title="Look in docs/ too", pattern_kind=Strategy.PatternKind.MANUAL)
    version = StrategyVersion.objects.create(strategy=strategy, number=1, pattern="p", new_guidance="Check docs/")
    AppliedStrategy.objects.create(run=run, strategy_version=version, arm=AppliedStrategy.Arm.TREATMENT)
    client.force_login(operator)
    html = client.get(reverse("feedback-run-detail", args=[run.pk])).content.decode()
    assert "Look in docs/ too" in html and "Trial treatment (applied)" in html
    assert "You are &lt;careful&gt;." in html and "120 in / 30 out" in html
