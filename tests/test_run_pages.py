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
    # Three model calls (a plan and a read, the analysis, the answer) and three tool calls.
    assert html.count('class="step ') == 6
    assert "Read the file" in html  # the plan
    assert "read_text_file" in html and "analyze_text" in html
    assert "Offline demo model (rule-based, no LLM)" in html
    assert 'hx-trigger="every 1s"' not in html  # finished: no more polling
    assert 'hx-trigger="revealed"' not in html  # six steps: one page


def test_an_active_run_appends_new_steps_and_stops_polling_when_it_ends(client, operator):
    run = make_run(status=Run.Status.RUNNING, started_at=timezone.now())
    Step.objects.create(run=run, index=0, kind=Step.Kind.THOUGHT, thought="Thinking about <b>it</b>")
    client.force_login(operator)
    page = client.get(reverse("feedback-run-detail", args=[run.pk])).content.decode()
    assert "<html" in page and page.count('class="step ') == 1
    # The trace's tail polls its own URL for the steps after the last one shown: the page's one poller.
    url = reverse("feedback-run-steps", args=[run.pk])
    assert f'id="trace-tail-{run.pk}" hx-get="{url}?after=0&amp;seen=running" hx-trigger="every 1s"' in page
    assert page.count('hx-trigger="every') == 1
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
    fragment = client.get(url, {"after": 1, "seen": "running"}, headers=htmx).content.decode()
    assert "every 1s" not in fragment and "trace-tail" not in fragment  # ended: the tail stops polling
    assert "Answered" in fragment and 'id="final-output"' in fragment
    assert f'<span id="run-announce-{run.pk}" hx-swap-oob="innerHTML">Run #{run.pk}: Answered</span>' in fragment
    # ...and hands over to the evaluation section, which polls while the evaluation is awaited.
    evaluations = reverse("feedback-run-evaluations", args=[run.pk])
    assert f'id="run-evaluations" hx-swap-oob="outerHTML" hx-get="{evaluations}" hx-trigger="every 2s"' in fragment


def test_each_part_of_the_run_page_is_at_its_own_url(client, operator):
    run = make_run(status=Run.Status.QUEUED)
    client.force_login(operator)
    htmx = {"HX-Request": "true"}

    def part(name: str) -> str:
        return client.get(reverse(name, args=[run.pk]), headers=htmx).content.decode().lstrip()

    assert part("feedback-run-summary").startswith(f'<section class="card run-summary" id="run-summary-{run.pk}"')
    assert part("feedback-run-steps").startswith(f'<li class="trace-tail live" id="trace-tail-{run.pk}"')
    assert part("feedback-run-evaluations").startswith('<section class="card" id="run-evaluations"')
    assert part("feedback-run-child").startswith(f'<div class="child-run" id="child-run-{run.pk}"')
    # The page's own URL is the page, whoever asks.
    assert "<html" in part("feedback-run-detail")


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
    html = client.get(url, {"sort": "oldest"}).content.decode()
    assert f'id="run-{done.pk}"' in html and "hx-trigger" not in html  # nothing to watch
    active = make_run(status=Run.Status.QUEUED, text="waiting task")
    html = client.get(url, {"sort": "oldest"}).content.decode()
    # One poller for the whole table: the table itself, at the list's own URL.
    assert html.count("hx-trigger") == 1 and 'hx-trigger="every 2s"' in html
    filtered = client.get(url, {"status": "queued"}).content.decode()
    assert f'id="run-{active.pk}"' in filtered and f'id="run-{done.pk}"' not in filtered
    fragment = client.get(url, {"status": "nonsense"}, headers={"HX-Request": "true"}).content.decode()
    assert fragment.lstrip().startswith('<div id="run-table"')
    assert f'id="run-{done.pk}"' in fragment
    # The poll's answer: the table as it now is, still polling while a row is active.
    htmx = {"HX-Request": "true"}
    Run.objects.filter(pk=active.pk).update(status=Run.Status.RUNNING, step_count=2)
    answer = client.get(url, {"sort": "oldest"}, headers=htmx)
    assert answer.status_code == 200 and "Running" in answer.content.decode()
    assert 'hx-trigger="every 2s"' in answer.content.decode()
    Run.objects.filter(pk=active.pk).update(status=Run.Status.SUCCEEDED)
    answer = client.get(url, {"sort": "oldest"}, headers=htmx)
    # Nothing left to change: the table comes without a poller, as 286, and htmx stops asking.
    assert answer.status_code == 286 and "Answered" in answer.content.decode()
    assert "hx-get" not in answer.content.decode()


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
        client.get(reverse("feedback-run-steps", args=[run.pk]), {"after": -1}, headers=htmx).content.decode(),
        client.get(reverse("feedback-run-child", args=[child.pk]), headers=htmx).content.decode(),
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


def test_a_confirmation_card_in_a_live_part_leads_back_to_the_run_s_page(client, reviewer):
    from feedback.models import ToolConfirmation

    run = make_run(status=Run.Status.AWAITING_CONFIRMATION, started_at=timezone.now())
    ToolConfirmation.objects.create(run=run, turn=1, tool_call_id="c1", tool_name="send_reply", arguments={})
    client.force_login(reviewer)
    steps = reverse("feedback-run-steps", args=[run.pk])
    html = client.get(steps, {"after": -1, "seen": "awaiting_confirmation"}, headers={"HX-Request": "true"})
    # Decided there, the reviewer comes back to the page, not to the part's URL.
    assert f'<input type="hidden" name="next" value="/runs/{run.pk}/">' in html.content.decode()
