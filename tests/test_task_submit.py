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


def test_it_queues_a_run_after_commit(client, staff, demo_workspace, django_capture_on_commit_callbacks, sent_tasks):
    def sent() -> list[int]:
        return [args[0] for name, args, _ in sent_tasks if name == "feedback.tasks.run_execute_task"]

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
    assert len(callbacks) == 1 and sent() == [run.pk]
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


def _text_file(name: str, content: bytes = b"hello,world\n1,2\n"):
    from django.core.files.uploadedfile import SimpleUploadedFile

    return SimpleUploadedFile(name, content, content_type="text/plain")


def test_uploaded_files_go_into_a_new_workspace_for_the_run(client, staff, demo_workspace, monkeypatch):

    client.force_login(staff)
    response = client.post(
        URL,
        {
            "kind": "file_analysis",
            "text": "Summarise notes.md and data.csv",
            "workspace": demo_workspace.pk,
            "files": [_text_file("notes.md", b"# Notes\n"), _text_file("data.csv")],
        },
    )
    assert response.status_code == 302
    run = Run.objects.get()
    workspace = run.task.workspace
    assert workspace != demo_workspace and workspace.name.startswith("upload-")
    assert (workspace.path / "notes.md").read_bytes() == b"# Notes\n"
    assert (workspace.path / "data.csv").exists()
    assert (workspace.path / "report.txt").exists()  # the chosen workspace's files come along
    assert not (demo_workspace.path / "notes.md").exists()  # the shared workspace is untouched


@pytest.mark.parametrize(
    ("upload", "message"),
    [
        (_text_file("picture.png"), "only .txt, .md, .csv, .json, .log files are accepted"),
        (_text_file("fake.txt", b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe"), "fake.txt is not UTF-8 text"),
        (_text_file("nul.log", b"abc\x00def"), "nul.log is not a text file"),
        (_text_file("big.txt", b"a" * (1024 * 1024 + 1)), "big.txt is larger than 1 MB"),
        (_text_file(".env.txt"), "only .txt"),
        (_text_file("..%2Fescape.txt"), "only .txt"),
    ],
)
def test_bad_uploads_are_refused_with_a_reason(client, staff, upload, message):
    client.force_login(staff)
    response = client.post(URL, {"kind": "general", "text": "Read the file please", "files": [upload]})
    assert response.status_code == 400
    assert message in response.content.decode()
    assert not Run.objects.exists()


def test_an_unsafe_upload_name_never_leaves_the_workspace(staff, tmp_path):
    from feedback.agent.sandbox import SandboxError
    from feedback.services import workspace_with_uploads

    # Django already drops directories from upload names; the sandbox catches encoded ones.
    with pytest.raises(SandboxError):
        workspace_with_uploads(base=None, files=[_text_file("..%2F..%2Fescape.txt")], owner=staff)
    assert not (tmp_path / "escape.txt").exists()


def test_changing_the_kind_swaps_only_its_help(client, staff):
    client.force_login(staff)
    response = client.get(URL, {"kind": "arithmetic"}, headers={"HX-Request": "true"})
    html = response.content.decode()
    assert html.lstrip().startswith('<div id="kind-help"')
    assert "(17 * 23 + 4) / 5" in html and "<form" not in html


def test_a_recurring_task_gets_a_beat_entry_that_queues_new_runs(client, staff, sent_tasks):
    from django_celery_beat.models import PeriodicTask

    from feedback import tasks

    client.force_login(staff)
    response = client.post(URL, {"kind": "arithmetic", "text": "What is 2 + 2?", "repeat": "hours", "every": "6"})
    assert response.status_code == 302
    run = Run.objects.get()
    entry = PeriodicTask.objects.get(name=f"feedback-task-{run.task_id}")
    assert entry.interval.every == 6 and entry.interval.period == "hours" and entry.enabled
    assert entry.task == "feedback.tasks.task_scheduled_run_task"

    # What beat does when the entry is due: the thin task queues a new run of the same task.
    tasks.task_scheduled_run_task(**__import__("json").loads(entry.kwargs))
    assert Run.objects.filter(task=run.task).count() == 2


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"repeat": "hours"}, "every", "Say how often the task repeats."),
        ({"repeat": "minutes", "every": "1"}, "every", "at most every 5 minutes"),
        ({"repeat": "cron", "cron": "99 * * * *"}, "cron", "Minute 99 is out of range 0-59."),
        ({"repeat": "cron", "cron": "0 24 * * *"}, "cron", "Hour 24 is out of range 0-23."),
        ({"repeat": "cron", "cron": "0 7 * * 1-8"}, "cron", "Day of week 8 is out of range 0-6."),
        ({"repeat": "cron", "cron": "*/0 * * * *"}, "cron", "Minute: a step is at least 1"),
        ({"repeat": "cron", "cron": "1,,2 * * * *"}, "cron", "Minute: “1,,2” is not a value celery can read"),
        ({"repeat": "cron", "cron": "0 0 31 2 *"}, "cron", "This schedule never fires"),
        ({"repeat": "cron", "cron": "* * *"}, "cron", "A cron expression has five fields"),
    ],
)
def test_a_bad_schedule_is_refused(client, staff, data, field, message):
    client.force_login(staff)
    response = client.post(URL, {"kind": "arithmetic", "text": "What is 2 + 2?", **data})
    assert response.status_code == 400
    assert message in response.content.decode()
    assert response.context["form"].errors[field]


def test_a_cron_schedule_is_listed_and_can_be_turned_off(client, staff, monkeypatch):
    from django_celery_beat.models import PeriodicTask

    client.force_login(staff)
    client.post(URL, {"kind": "arithmetic", "text": "What is <b>2</b> + 2?", "repeat": "cron", "cron": "0 7 * * 1-5"})
    entry = PeriodicTask.objects.get()
    html = client.get(reverse("feedback-schedule-list")).content.decode()
    assert f'id="schedule-{entry.pk}"' in html and "<code>0 7 * * 1-5</code>" in html
    assert "What is &lt;b&gt;2&lt;/b&gt; + 2?" in html
    response = client.post(reverse("feedback-schedule-toggle", args=[entry.pk]), follow=True)
    assert "The schedule is off" in response.content.decode()
    entry.refresh_from_db()
    assert not entry.enabled


def test_an_empty_schedule_list_says_how_to_make_one(client, staff):
    client.force_login(staff)
    assert "No recurring tasks." in client.get(reverse("feedback-schedule-list")).content.decode()
