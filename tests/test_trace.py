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
    # evaluations (with their reviewers' score values) once for the page, not once per step (100
    # here) nor per step that went wrong (10).
    with django_assert_max_num_queries(14):
        response = client.get(url)
    html = response.content.decode()
    assert html.count('class="step ') == TRACE_PAGE_SIZE
    assert len(response.content) < 150_000  # about 45 kB today
    assert f'?after={TRACE_PAGE_SIZE - 1}" hx-trigger="revealed"' in html
    assert "10 steps went wrong" in html  # found by query although most are not on this page


def test_each_further_page_costs_the_same_few_queries(client, operator, long_run, django_assert_max_num_queries):
    client.force_login(operator)
    url = reverse("feedback-run-steps", args=[long_run.pk])
    last_page = 4999 - TRACE_PAGE_SIZE
    for after in (TRACE_PAGE_SIZE - 1, 2499, last_page):
        # N+1 guarded: a further page of steps costs the same few queries wherever it starts,
        # never one per step on the page.
        with django_assert_max_num_queries(12):
            html = client.get(url, {"after": after}, headers=HTMX).content.decode()
        assert html.count('class="step ') == min(TRACE_PAGE_SIZE, 4999 - after)
        assert f'id="run-{long_run.pk}-step-{after + 1}"' in html
    last = client.get(url, {"after": last_page}, headers=HTMX).content.decode()
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
    bars = re.findall(r'id="run-\d+-step-(\d)".*?<span class="bar (\w+)" data-at="(\d+)" data-ms="(\d+)"', html, re.S)
    assert bars == [("0", "model", "0", "1000"), ("1", "tool", "5000", "2500"), ("2", "model", "0", "0"),
                    ("3", "model", "0", "0")]  # fmt: skip
    # Each step's start and duration in words beside it, and the axis's end.
    assert '+5.0 s · <span class="step-duration">2.5 s</span>' in html and "+0 ms" in html
    no_times = re.search(rf'id="run-{run.pk}-step-3".*?class="muted step-time" title="[^"]*">(.*?)</span>', html, re.S)
    assert no_times.group(1) == ""  # a step without times says none
    assert '<div class="trace-axis" aria-hidden="true"><span>0 s</span><span>10.0 s</span></div>' in html


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
    # A fold button (closed) that loads the child's trace into the step the first time.
    assert (
        f'aria-expanded="false" aria-controls="child-body-{child.pk}" data-child-toggle\n'
        f'      hx-get="/runs/{child.pk}/child/" hx-target="#child-body-{child.pk}"'
    ) in html
    assert f'<div class="child-body" id="child-body-{child.pk}" hidden></div>' in html
    assert f'href="/runs/{child.pk}/">its own page</a>' in html  # without JavaScript
    fragment = client.get(reverse("feedback-run-child", args=[child.pk]), headers=HTMX)
    text = fragment.content.decode()
    assert text.lstrip().startswith(f'<div class="child-run" id="child-run-{child.pk}"')
    assert f'id="run-{child.pk}-step-0"' in text and "6 * 7 = 42" in text
    assert "What is &lt;6&gt; * 7?" in text
    assert 'id="run-status"' not in text  # nested: no clash with the parent's ids
    assert 'data-depth="1"' in text and "level 1" in text
    assert "trace-filter" not in text  # the filter is the page's, not a nested run's


def test_a_sub_agent_run_shows_its_depth_in_the_tree(client, operator):
    root = make_run(status=Run.Status.SUCCEEDED)
    middle = make_run(status=Run.Status.SUCCEEDED, parent=root)
    leaf = make_run(status=Run.Status.SUCCEEDED, parent=middle)
    client.force_login(operator)
    text = client.get(reverse("feedback-run-child", args=[leaf.pk]), headers=HTMX).content.decode()
    assert 'data-depth="2"' in text and "level 2" in text


def test_a_sub_agent_runs_steps_lie_on_its_top_level_runs_time_axis(client, operator):
    start = timezone.now() - timedelta(minutes=1)
    root = make_run(status=Run.Status.SUCCEEDED, started_at=start, finished_at=start + timedelta(seconds=20))
    middle = make_run(status=Run.Status.SUCCEEDED, parent=root, started_at=start + timedelta(seconds=2))
    leaf = make_run(status=Run.Status.SUCCEEDED, parent=middle, started_at=start + timedelta(seconds=4),
                    finished_at=start + timedelta(seconds=6))  # fmt: skip
    Step.objects.create(run=leaf, index=0, kind=Step.Kind.THOUGHT, started_at=start + timedelta(seconds=5),
                        duration_ms=300)  # fmt: skip
    client.force_login(operator)
    text = client.get(reverse("feedback-run-child", args=[leaf.pk]), headers=HTMX).content.decode()
    # Five seconds after the top-level run's start, on its 20-second scale, not the leaf's own.
    assert '<span class="bar model" data-at="5000" data-ms="300">' in text
    assert f'id="trace-scale-{leaf.pk}" data-trace="trace-{leaf.pk}" data-span="20000"' in text
    assert "+5.0 s · " in text and "<span>20.0 s</span>" in text
    # While the top-level run goes on, the scale grows from its start, as its own trace's does.
    Run.objects.filter(pk=root.pk).update(status=Run.Status.RUNNING, finished_at=None)
    text = client.get(reverse("feedback-run-child", args=[leaf.pk]), headers=HTMX).content.decode()
    assert f'data-span-from="{round(start.timestamp() * 1000)}"' in text


def test_payloads_start_folded_with_their_size(client, operator):
    run = make_run(status=Run.Status.SUCCEEDED)
    Step.objects.create(run=run, index=0, kind=Step.Kind.THOUGHT, thought="I will read <notes>.")
    Step.objects.create(run=run, index=1, kind=Step.Kind.TOOL_CALL, tool_name="read_text_file",
                        arguments={"path": "notes.txt"}, result={"text": "é" * 600})  # fmt: skip
    client.force_login(operator)
    html = client.get(reverse("feedback-run-detail", args=[run.pk])).content.decode()
    assert "<details open" not in html.split('id="trace-')[1]  # nothing of the trace starts open
    assert 'Arguments <span class="size">25 B</span>' in html
    # The result's UTF-8 bytes (600 two-byte letters and the JSON around them), in kB.
    assert 'Result <span class="size">1.2 kB</span>' in html
    message = 'Model message <span class="size">20 B</span> <span class="preview">I will read &lt;notes&gt;.</span>'
    assert message in html


def _filter_run() -> Run:
    start = timezone.now() - timedelta(minutes=1)
    run = make_run(status=Run.Status.FAILED, started_at=start, finished_at=start + timedelta(seconds=5))
    rows = [
        dict(kind=Step.Kind.THOUGHT, thought="Look up the weather"),
        dict(kind=Step.Kind.TOOL_CALL, tool_name="http_get", arguments={"url": "https://weather.example"},
             success=False, error="Name or service not known", error_class="ToolError"),
        dict(kind=Step.Kind.TOOL_CALL, tool_name="delete_file", arguments={"path": "a.txt"}, success=False,
             error="Refused by strategy #3", error_class="GuardrailRefused"),
        dict(kind=Step.Kind.TOOL_CALL, tool_name="calculator", arguments={"expression": "6 * 7"}, result={"value": 42},
             success=True, validation_status=Step.Validation.FAIL),
        dict(kind=Step.Kind.TOOL_CALL, tool_name="calculator", arguments={"expression": "1 + 1"}, result={"value": 2},
             success=True),
        dict(kind=Step.Kind.FINAL, thought="It is sunny"),
    ]  # fmt: skip
    for index, fields in enumerate(rows):
        Step.objects.create(run=run, index=index, started_at=start, **fields)
    return run


def _shown(html: str, run: Run) -> list[int]:
    return [int(i) for i in re.findall(rf'<li class="step [^"]*" id="run-{run.pk}-step-(\d+)"', html)]


def test_only_what_went_wrong_keeps_errors_refusals_and_failed_validations(client, operator):
    run = _filter_run()
    client.force_login(operator)
    url = reverse("feedback-run-detail", args=[run.pk])
    html = client.get(url, {"problems": "1"}).content.decode()
    assert _shown(html, run) == [1, 2, 3]
    assert "refused by a guardrail" in html
    assert 'name="problems" value="1" id="trace-problems-' in html and " checked>" in html  # the form says so
    assert f'href="{url}" id="trace-clear-{run.pk}">Show every step</a>' in html
    assert _shown(client.get(url).content.decode(), run) == [0, 1, 2, 3, 4, 5]


def test_search_within_the_trace_matches_every_word_in_any_field(client, operator):
    run = _filter_run()
    client.force_login(operator)
    url = reverse("feedback-run-detail", args=[run.pk])

    def shown(**params: str) -> list[int]:
        return _shown(client.get(url, params).content.decode(), run)

    assert shown(q="weather") == [0, 1]  # a thought and an argument
    assert shown(q="CALCULATOR") == [3, 4]  # a tool, whatever the case
    assert shown(q="calculator 42") == [3]  # every word, each in any field
    assert shown(q="guardrailrefused") == [2]  # an error class
    assert shown(q="calculator", problems="1") == [3]  # both filters at once
    html = client.get(url, {"q": "<nothing>"}).content.decode()
    assert _shown(html, run) == [] and "No step matches this filter." in html
    assert 'value="&lt;nothing&gt;"' in html  # what was typed, escaped, stays in the box


def test_the_filter_form_swaps_the_trace_body_and_keeps_the_url(client, operator):
    run = _filter_run()
    client.force_login(operator)
    url = reverse("feedback-run-detail", args=[run.pk])
    html = client.get(url).content.decode()
    assert f'hx-get="{url}" hx-target="#trace-body-{run.pk}" hx-swap="outerHTML" hx-push-url="true"' in html
    headers = {**HTMX, "HX-Target": f"trace-body-{run.pk}"}
    part = client.get(url, {"q": "calculator"}, headers=headers)
    text = part.content.decode()
    assert text.lstrip().startswith(f'<div class="trace-body" id="trace-body-{run.pk}">')
    assert "<html" not in text and _shown(text, run) == [3, 4]


def test_a_filtered_trace_pages_by_keyset_with_its_filter(client, operator, django_assert_max_num_queries):
    start = timezone.now() - timedelta(minutes=5)
    run = make_run(status=Run.Status.SUCCEEDED, started_at=start, finished_at=start + timedelta(seconds=200))
    _bulk_steps(run, 10_000)  # 20 of them failed: indexes 7, 507, 1007...
    client.force_login(operator)
    url = reverse("feedback-run-detail", args=[run.pk])
    # N+1 guarded: a filtered page of a 10,000-step trace reads only its own steps' attempts and
    # sub-agent runs, not one query per step (and the evaluations' score values once).
    with django_assert_max_num_queries(14):
        html = client.get(url, {"q": "77", "problems": "0"}).content.decode()
    # "77" is in the arguments ("i + 1") or the result (i + 1) of a few hundred steps: the first 100.
    matching = [i for i in range(10_000) if "77" in str(i) or "77" in str(i + 1)]
    shown = _shown(html, run)
    assert shown == matching[:TRACE_PAGE_SIZE]
    # The loader asks for the next page with the same filter, after the last step shown.
    assert f'?after={shown[-1]}&amp;q=77" hx-trigger="revealed"' in html
    steps = reverse("feedback-run-steps", args=[run.pk])
    with django_assert_max_num_queries(12):
        wrong = client.get(steps, {"after": 1000, "problems": "1"}, headers=HTMX).content.decode()
    assert _shown(wrong, run) == list(range(1007, 10_000, 500))


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
    # Retried once, as the recorder keeps a call whose first try failed: both attempts.
    step = Step.objects.create(
        run=run,
        index=3,
        kind=Step.Kind.TOOL_CALL,
        tool_name="calculator",
        success=True,
        arguments={"expression": "1 + 1"},
        result={"value": 2},
        attempts=2,
    )
    StepAttempt.objects.create(
        step=step,
        number=1,
        started_at=timezone.now(),
        duration_ms=4,
        error="timed out",
        error_class="ToolTimeout",
        retryable=True,
    )
    StepAttempt.objects.create(step=step, number=2, started_at=timezone.now(), duration_ms=3)
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


def test_a_search_with_a_nul_or_only_spaces_is_no_filter_and_no_error(client, operator):
    run = _filter_run()
    client.force_login(operator)
    url = reverse("feedback-run-detail", args=[run.pk])
    assert _shown(client.get(url, {"q": "   "}).content.decode(), run) == [0, 1, 2, 3, 4, 5]
    response = client.get(f"{url}?q=weath%00er")  # a NUL PostgreSQL refuses in a comparison
    assert response.status_code == 200 and _shown(response.content.decode(), run) == [0, 1]
