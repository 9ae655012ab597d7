import pytest
from django.urls import reverse

from feedback.models import Run, Task

pytestmark = pytest.mark.django_db
URL = reverse("feedback-task-submit")


def test_it_shows_the_form_and_names_the_offline_model(client, staff, demo_workspace):
    client.force_login(staff)
    html = client.get(URL).content.decode()
    assert 'name="text"' in html and 'name="kind"' in html and 'name="expected_answer"' in html
    assert "Offline demo model (rule-based, no LLM)" in html
    assert ">demo</option>" in html


def test_it_queues_a_run_after_commit(client, staff, demo_workspace, django_capture_on_commit_callbacks, monkeypatch):
    from feedback import tasks

    sent = []
    monkeypatch.setattr(tasks.run_execute_task, "delay", sent.append)
    client.force_login(staff)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = client.post(
            URL,
            {
                "kind": "file_analysis",
                "text": "Summarise report.txt",
                "workspace": demo_workspace.pk,
                "expected_answer": "80 words",
            },
        )
    run = Run.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse("feedback-run-detail", args=[run.pk])
    assert len(callbacks) == 1 and sent == [run.pk]
    assert run.status == Run.Status.QUEUED and run.task_kind == "file_analysis"
    assert run.task.created_by == staff and run.task.expected_answer == "80 words"


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"kind": "arithmetic", "text": ""}, "text", "This field is required."),
        ({"kind": "arithmetic", "text": "   hi  "}, "text", "at least 5 characters"),
        ({"kind": "arithmetic", "text": "x" * (Task.TEXT_MAX_LENGTH + 1)}, "text", "at most 4000 characters"),
        ({"kind": "telepathy", "text": "What is 1 + 1?"}, "kind", "Select a valid choice"),
        (
            {"kind": "arithmetic", "text": "What is 1 + 1?", "workspace": "999"},
            "workspace",
            "Select a valid choice",
        ),
        (
            {"kind": "arithmetic", "text": "What is 1 + 1?", "expected_answer": "y" * 5000},
            "expected_answer",
            "at most 4000 characters",
        ),
    ],
)
def test_bad_input_gets_a_clear_error_and_keeps_what_was_typed(client, staff, data, field, message):
    client.force_login(staff)
    response = client.post(URL, data)
    assert response.status_code == 400
    assert message in response.content.decode()
    assert response.context["form"].errors[field]
    assert not Run.objects.exists()
    if data.get("text", "").strip() and field != "text":
        assert data["text"] in response.content.decode()


def test_html_in_the_task_is_shown_as_text(client, staff):
    client.force_login(staff)
    evil = '<script>alert("x")</script><img src=x onerror=alert(1)>'
    response = client.post(URL, {"kind": "general", "text": evil, "expected_answer": "x" * 5000})
    html = response.content.decode()
    assert "<script>alert" not in html and "<img src=x" not in html
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html
