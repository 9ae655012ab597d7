"""A first start that shows the product: the task form's defaults lead a newcomer to a run that
answers, not into a failure."""

import re

import pytest
from django.urls import reverse

from feedback.agent.loop import execute_run
from feedback.models import Run

pytestmark = pytest.mark.django_db
URL = reverse("feedback-task-submit")


def _selected(html: str, name: str) -> str:
    select = re.search(rf'<select name="{name}".*?</select>', html, re.S).group(0)
    return re.search(r'<option value="([^"]*)"[^>]*selected', select).group(1)


def test_the_form_defaults_to_file_analysis_in_the_shared_demo_workspace(client, staff, demo_workspace):
    client.force_login(staff)
    html = client.get(URL).content.decode()
    assert _selected(html, "kind") == "file_analysis"
    assert _selected(html, "workspace") == str(demo_workspace.pk)
    assert 'placeholder="e.g. Summarise report.txt and count its words"' in html


def test_the_placeholder_task_submitted_with_the_defaults_is_answered(
    client, staff, demo_workspace, django_capture_on_commit_callbacks
):
    client.force_login(staff)
    html = client.get(URL).content.decode()
    defaults = {"kind": _selected(html, "kind"), "workspace": _selected(html, "workspace")}
    with django_capture_on_commit_callbacks(execute=False):
        client.post(URL, {**defaults, "text": "Summarise report.txt and count its words"})
    run = Run.objects.get()
    execute_run(run.pk)
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED, run.error
    assert "80 words" in run.final_output


def test_a_posted_form_keeps_what_was_chosen_not_the_defaults(client, staff, demo_workspace):
    client.force_login(staff)
    html = client.post(URL, {"kind": "arithmetic", "text": "x", "workspace": ""}).content.decode()
    assert _selected(html, "kind") == "arithmetic"
    assert 'name="workspace"' in html and _selected(html, "workspace") == ""


def test_the_seeded_history_has_something_true_on_every_page(staff, reviewer, demo_workspace):
    from feedback.demo_history import seed_history
    from feedback.models import AppliedStrategy, Evaluation, Strategy, Task

    history = seed_history(demo_workspace, runs=30, trial_runs=12)
    runs = Run.objects.all()
    assert history.runs == runs.count() > 30
    assert set(runs.values_list("task_kind", flat=True)) >= {
        Task.Kind.FILE_ANALYSIS,
        Task.Kind.ARITHMETIC,
        Task.Kind.EMAIL_TRIAGE,
    }
    assert runs.filter(outcome=Run.Outcome.ACCOMPLISHED).exists()
    assert runs.filter(outcome=Run.Outcome.NOT_ACCOMPLISHED).exists()
    assert not runs.filter(status__in=Run.ACTIVE_STATUSES).exists() and not runs.filter(score=None).exists()
    assert Strategy.objects.filter(status=Strategy.Status.PROPOSED).exists()
    trial = Strategy.objects.get(status=Strategy.Status.TRIAL)
    assert trial.title == history.on_trial and trial.events.filter(reason="seeded demo history").exists()
    arms = set(AppliedStrategy.objects.filter(strategy_version__strategy=trial).values_list("arm", flat=True))
    assert arms == {AppliedStrategy.Arm.TREATMENT, AppliedStrategy.Arm.CONTROL}
    assert Evaluation.objects.filter(kind=Evaluation.Kind.HUMAN).count() == 1
    rerun = runs.get(retry_of__isnull=False)
    assert rerun.retry_of.outcome == Run.Outcome.NOT_ACCOMPLISHED and rerun.score is not None
    parent = runs.get(task__text="Use sub-agents to summarise report.txt and docs/meeting-notes.md")
    children = parent.children.order_by("pk")
    assert parent.status == Run.Status.SUCCEEDED and children.count() == 2
    assert all(child.status == Run.Status.SUCCEEDED and child.final_output in parent.final_output for child in children)
    # A tool call retried for real: the status service the seed starts answered 503, then 200.
    status_run = runs.get(task__text__startswith="Check the demo status service")
    call = status_run.steps.get(tool_name="http_get")
    attempts = list(call.attempt_rows.values_list("error", "retryable"))
    assert call.success and len(attempts) == 2
    assert attempts[0][0].startswith("HTTP 503 from http://127.0.0.1:") and attempts[0][1]
    assert attempts[1] == ("", False)
    assert status_run.status == Run.Status.SUCCEEDED and '"status": "ok"' in status_run.final_output
    assert seed_history(demo_workspace) is None and Run.objects.count() == history.runs  # never twice


def test_the_seeded_retry_is_on_the_trace_page(client, operator, staff, reviewer, demo_workspace):
    from feedback.demo_history import seed_history

    seed_history(demo_workspace, runs=6, trial_runs=2)
    run = Run.objects.get(task__text__startswith="Check the demo status service")
    client.force_login(operator)
    html = client.get(reverse("feedback-run-detail", args=[run.pk])).content.decode()
    shown = (
        r'<p class="muted attempt">attempt 1 \(\d+ ms\): <code>ToolError</code> '
        r"HTTP 503 from http://127\.0\.0\.1:\d+/status \(retried\)</p>"
    )
    assert re.search(shown, html)
