import pytest
from django.urls import reverse

from feedback.models import Run, Step

from ..conftest import make_user
from .worker import wait_for_run

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_a_submitted_task_runs_on_a_real_worker(client, celery_worker_process):
    from feedback.demo import seed_workspace

    workspace = seed_workspace()
    staff = make_user("e2e-staff", "staff")
    client.force_login(staff)
    response = client.post(
        reverse("feedback-task-submit"),
        {
            "kind": "email_triage",
            "text": "Classify the emails in inbox/ and flag the urgent ones",
            "workspace": workspace.pk,
        },
    )
    assert response.status_code == 302
    run_id = Run.objects.get().pk

    run = wait_for_run(run_id)

    assert run.status == Run.Status.SUCCEEDED, (run.error, celery_worker_process.log())
    assert run.started_at and run.finished_at and run.started_at <= run.finished_at
    steps = list(run.steps.order_by("index"))
    assert [s.index for s in steps] == list(range(run.step_count))
    assert [s.tool_name for s in steps if s.kind == Step.Kind.TOOL_CALL][:2] == ["update_plan", "list_directory"]
    assert sum(s.tool_name == "read_text_file" for s in steps) == 6
    assert run.final_output.startswith("Triaged 6 email(s); 3 urgent.")

    html = client.get(reverse("feedback-run-detail", args=[run_id])).content.decode()
    assert "Answered" in html
    assert "Triaged 6 email(s); 3 urgent." in html
    assert html.count('class="step ') == len(steps)


def test_each_queued_run_is_executed_once(client, celery_worker_process):
    staff = make_user("burst-staff", "staff")
    client.force_login(staff)
    for i in range(10):
        client.post(reverse("feedback-task-submit"), {"kind": "arithmetic", "text": f"What is {i} + 100?"})
    runs = [wait_for_run(r.pk) for r in Run.objects.order_by("pk")]
    assert [r.status for r in runs] == [Run.Status.SUCCEEDED] * 10
    assert sorted(r.final_output for r in runs) == sorted(f"{i} + 100 = {i + 100}" for i in range(10))
    # A plan and one call, then the answer: exactly these steps each, never duplicated.
    for run in runs:
        assert list(run.steps.values_list("kind", "tool_name")) == [
            ("thought", ""),
            ("tool_call", "update_plan"),
            ("tool_call", "calculator"),
            ("final", ""),
        ]
