import pytest
from django.urls import reverse
from django.utils import timezone

from feedback.agent.loop import execute_run
from feedback.models import Run, Step, Task

from .factories import make_run

pytestmark = pytest.mark.django_db


def test_run_page_shows_the_trace_and_answer(client, operator, demo_workspace):
    run = make_run(
        text="Summarise report.txt and count its words",
        kind=Task.Kind.FILE_ANALYSIS,
        workspace=demo_workspace,
    )
    execute_run(run.pk)
    client.force_login(operator)
    html = client.get(reverse("feedback-run-detail", args=[run.pk])).content.decode()
    assert "Answered" in html
    assert "It has 80 words" in html
    assert html.count('class="step ') == 5
    assert "Read the file" in html  # the plan
    assert "read_text_file" in html and "analyze_text" in html
    assert "Offline demo model (rule-based, no LLM)" in html
    assert 'hx-trigger="every 1s"' not in html  # finished: no more polling
    assert 'hx-trigger="revealed"' not in html  # five steps: one page


def test_an_active_run_appends_new_steps_and_stops_polling_when_it_ends(client, operator):
    run = make_run(status=Run.Status.RUNNING, started_at=timezone.now())
    Step.objects.create(run=run, index=0, kind=Step.Kind.THOUGHT, thought="Thinking about <b>it</b>")
    client.force_login(operator)
    url = reverse("feedback-run-detail", args=[run.pk])
    page = client.get(url).content.decode()
    assert "<html" in page and page.count('class="step ') == 1
    # The trace's tail polls for the steps after the last one shown.
    assert f'id="trace-tail-{run.pk}"' in page and '?after=0&amp;seen=running" hx-trigger="every 1s"' in page
    htmx = {"HX-Request": "true"}
    assert client.get(url, {"after": 0}, headers=htmx).content.decode().count('class="step ') == 0

    Step.objects.create(run=run, index=1, kind=Step.Kind.TOOL_CALL, tool_name="calculator", arguments={"x": "<i>"})
    fragment = client.get(url, {"after": 0}, headers=htmx).content.decode()
    assert "<html" not in fragment
    assert fragment.count('class="step ') == 1 and f'id="run-{run.pk}-step-1"' in fragment
    assert "Thinking about" not in fragment  # only the new step, not a re-render
    assert "&lt;i&gt;" in fragment
    assert f'id="run-summary-{run.pk}"\n  hx-swap-oob="outerHTML"' in fragment
    assert '?after=1&amp;seen=running" hx-trigger="every 1s"' in fragment  # the tail moves on
    assert "run-announce" not in fragment  # no change of status: nothing to announce

    Run.objects.filter(pk=run.pk).update(status=Run.Status.SUCCEEDED, finished_at=timezone.now(), final_output="4")
    fragment = client.get(url, {"after": 1}, headers=htmx).content.decode()
    assert "every 1s" not in fragment and "trace-tail" not in fragment  # ended: polling stops
    assert "Answered" in fragment and 'id="final-output"' in fragment
    fragment = client.get(url, {"after": 1, "seen": "running"}, headers=htmx).content.decode()
    assert f'<span id="run-announce-{run.pk}" hx-swap-oob="innerHTML">Run #{run.pk}: Answered</span>' in fragment


def test_the_summary_alone_is_the_htmx_answer_without_after(client, operator):
    run = make_run(status=Run.Status.QUEUED)
    client.force_login(operator)
    fragment = client.get(reverse("feedback-run-detail", args=[run.pk]), headers={"HX-Request": "true"})
    assert fragment.content.decode().lstrip().startswith(f'<section class="card run-summary" id="run-summary-{run.pk}"')


def test_tool_results_with_html_are_escaped(client, operator):
    run = make_run(status=Run.Status.SUCCEEDED, final_output="<script>steal()</script>")
    Step.objects.create(
        run=run,
        index=0,
        kind=Step.Kind.TOOL_CALL,
        tool_name="read_text_file",
        arguments={"path": "<x>"},
        result={"text": "<img src=x onerror=alert(1)>"},
        success=True,
    )
    client.force_login(operator)
    html = client.get(reverse("feedback-run-detail", args=[run.pk])).content.decode()
    assert "<script>steal()" not in html and "<img src=x" not in html
    assert "&lt;script&gt;steal()&lt;/script&gt;" in html


def test_run_list_filters_and_polls_only_while_something_is_active(client, operator):
    done = make_run(status=Run.Status.SUCCEEDED, text="finished task")
    client.force_login(operator)
    url = reverse("feedback-run-list")
    html = client.get(url).content.decode()
    assert f'id="run-{done.pk}"' in html and "every 2s" not in html
    active = make_run(status=Run.Status.QUEUED, text="waiting task")
    html = client.get(url).content.decode()
    assert "every 2s" in html
    filtered = client.get(url, {"status": "queued"}).content.decode()
    assert f'id="run-{active.pk}"' in filtered and f'id="run-{done.pk}"' not in filtered
    fragment = client.get(url, {"status": "nonsense"}, headers={"HX-Request": "true"}).content.decode()
    assert fragment.lstrip().startswith('<div id="run-table"')
    assert f'id="run-{done.pk}"' in fragment
    # Only the active row polls, and its answer is the row alone.
    row = client.get(reverse("feedback-run-detail", args=[active.pk]), {"part": "row"}, headers={"HX-Request": "true"})
    assert row.content.decode().lstrip().startswith(f'<tr id="run-{active.pk}" hx-get=')


def test_empty_states(client, reviewer):
    client.force_login(reviewer)
    assert "No runs yet." in client.get(reverse("feedback-run-list")).content.decode()
    assert "No strategies yet." in client.get(reverse("feedback-strategy-list")).content.decode()


def test_missing_run_is_404(client, operator):
    client.force_login(operator)
    assert client.get(reverse("feedback-run-detail", args=[987654])).status_code == 404


def test_html_in_the_task_and_in_live_fragments_is_text(client, operator):
    evil = '<script>alert("task")</script>'
    run = make_run(status=Run.Status.RUNNING, text=evil)
    child = make_run(status=Run.Status.SUCCEEDED, text=evil, parent=run)
    Step.objects.create(
        run=run,
        index=0,
        kind=Step.Kind.TOOL_CALL,
        tool_name="<b>tool</b>",
        error="<img src=x onerror=1>",
        result={"html": "<iframe src=javascript:alert(1)>"},
        success=False,
    )
    client.force_login(operator)
    htmx = {"HX-Request": "true"}
    url = reverse("feedback-run-detail", args=[run.pk])
    pages = [
        client.get(url).content.decode(),
        client.get(url, {"after": -1}, headers=htmx).content.decode(),
        client.get(reverse("feedback-run-detail", args=[child.pk]), {"part": "child"}, headers=htmx).content.decode(),
    ]
    for html in pages:
        assert "<script>alert" not in html and "<img src=x" not in html and "<iframe" not in html
        assert "<b>tool</b>" not in html
    assert "&lt;script&gt;alert(&quot;task&quot;)&lt;/script&gt;" in pages[0] + pages[2]
    assert "&lt;img src=x onerror=1&gt;" in pages[1]
    assert "&lt;b&gt;tool&lt;/b&gt;" in pages[1]
    # The JSON download is JSON, never HTML a browser would render.
    response = client.get(reverse("feedback-run-trace-json", args=[run.pk]))
    assert response["Content-Type"] == "application/json"
