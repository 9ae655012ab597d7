"""Issue 22, point 5: each person's disk quota (feedback/quota.py). Their upload workspaces and the
sandboxes of their runs still kept count; a submission (task form, API, re-run, recurring task) that
would take them past it is refused with what they use, the quota and what to do, and nothing is
written."""

import html
import threading
from datetime import timedelta

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.template.defaultfilters import filesizeformat
from django.urls import reverse
from django.utils import timezone

from feedback import services
from feedback.agent.loop import execute_run
from feedback.agent.sandbox import sandbox_path
from feedback.models import Run, Task, Workspace
from feedback.quota import MB, QuotaExceeded, folder_bytes, usage_of

from .api_helpers import call, token_for
from .conftest import make_user
from .factories import make_finished_run

pytestmark = pytest.mark.django_db
URL = reverse("feedback-task-submit")
KB = 1024


def _uploads_of(user, size: int, name: str = "upload-earlier") -> Workspace:
    """An earlier upload of ``user``'s, ``size`` bytes on disk and as recorded."""
    workspace = Workspace.objects.create(name=name, owner=user, size_bytes=size)
    workspace.path.mkdir(parents=True)
    (workspace.path / "earlier.txt").write_bytes(b"x" * size)
    return workspace


def _file(size: int, name: str = "notes.txt") -> SimpleUploadedFile:
    return SimpleUploadedFile(name, b"a" * size, content_type="text/plain")


def _upload(client, user, size: int):
    """``user`` submits a task with one file of ``size`` bytes in the task form."""
    client.force_login(user)
    return client.post(URL, {"kind": "general", "text": "Summarise notes.txt", "files": [_file(size)]})


def _written(settings) -> tuple:
    """Everything a submission writes: rows and folders."""
    folders = sorted(p.name for p in settings.WORKSPACES_ROOT.iterdir()) if settings.WORKSPACES_ROOT.exists() else []
    return Workspace.objects.count(), Task.objects.count(), Run.objects.count(), folders


def _page_text(response) -> str:
    return html.unescape(response.content.decode())


def test_an_upload_past_the_quota_is_refused_on_the_page_and_nothing_is_written(client, staff, settings):
    settings.DISK_QUOTA_MB = 1
    _uploads_of(staff, 600 * KB)
    before = _written(settings)
    response = _upload(client, staff, 300 * KB)
    assert response.status_code == 400
    text = _page_text(response)
    # The upload's workspace and its run's copy of it: 2 x 300 KB.
    assert f"it needs {filesizeformat(600 * KB)} of disk" in text
    assert f"your files already take {filesizeformat(600 * KB)} of your {filesizeformat(MB)} quota" in text
    assert f"uploads {filesizeformat(600 * KB)}, copies your runs work on {filesizeformat(0)}" in text
    assert "Choose one of your earlier uploads as the workspace instead of uploading the files again" in text
    assert "removed 14 days after the run ends" in text
    assert _written(settings) == before


def test_an_upload_within_the_quota_is_accepted_and_its_sizes_recorded(client, staff, settings):
    settings.DISK_QUOTA_MB = 2
    _uploads_of(staff, 600 * KB)
    response = _upload(client, staff, 300 * KB)
    assert response.status_code == 302
    run = Run.objects.get()
    assert run.task.workspace.size_bytes == 300 * KB == folder_bytes(run.task.workspace.path)
    assert run.sandbox_bytes == 300 * KB  # reserved for its copy, before any worker made it


def test_an_upload_past_the_quota_is_refused_by_the_api_and_nothing_is_written(client, staff, settings):
    settings.DISK_QUOTA_MB = 1
    _uploads_of(staff, 600 * KB)
    before = _written(settings)
    body = {"text": "Summarise notes.txt", "files": [{"name": "notes.txt", "content": "a" * (300 * KB)}]}
    response = call(client, "POST", "/tasks", token=token_for(staff), body=body)
    assert response.status_code == 400, response.content
    (message,) = response.json()["errors"]["__all__"]
    assert f"your files already take {filesizeformat(600 * KB)} of your {filesizeformat(MB)} quota" in message
    assert "Choose one of your earlier uploads" in message
    assert _written(settings) == before


def test_the_sandboxes_of_their_runs_count_until_the_retention_policy_removes_them(
    client, staff, settings, demo_workspace
):
    """No upload at all: a run on a workspace makes a copy of it, which counts until it is removed."""
    settings.DISK_QUOTA_MB = 1
    kept = make_finished_run(user=staff, sandbox_bytes=MB - demo_workspace.size_bytes + 1, started_at=timezone.now())
    client.force_login(staff)
    data = {"kind": "file_analysis", "text": "Summarise report.txt", "workspace": demo_workspace.pk}
    refused = client.post(URL, data)
    assert refused.status_code == 400
    assert f"copies your runs work on {filesizeformat(kept.sandbox_bytes)}" in _page_text(refused)
    assert Run.objects.count() == 1
    Run.objects.filter(pk=kept.pk).update(sandbox_deleted_at=timezone.now())
    assert client.post(URL, data).status_code == 302
    assert Run.objects.count() == 2


def test_a_rerun_past_the_quota_is_refused_on_the_page_and_by_the_api(client, staff, settings):
    settings.DISK_QUOTA_MB = 1
    workspace = _uploads_of(staff, 700 * KB)
    run = make_finished_run(user=staff, started_at=timezone.now(), sandbox_bytes=0)
    Task.objects.filter(pk=run.task_id).update(workspace=workspace)
    client.force_login(staff)
    response = client.post(reverse("feedback-run-rerun", args=[run.pk]), follow=True)
    assert response.redirect_chain[-1][0] == reverse("feedback-run-detail", args=[run.pk])
    assert "Not submitted: it needs" in _page_text(response)
    assert f"of your {filesizeformat(MB)} quota" in _page_text(response)
    api = call(client, "POST", f"/runs/{run.pk}/rerun", token=token_for(staff))
    assert api.status_code == 400 and "Not submitted: it needs" in api.json()["errors"]["__all__"][0]
    assert Run.objects.count() == 1 and Task.objects.count() == 1


def test_a_recurring_task_past_the_quota_makes_no_run_this_time(staff, settings, caplog):
    settings.DISK_QUOTA_MB = 1
    workspace = _uploads_of(staff, 700 * KB)
    task = Task.objects.create(text="Summarise earlier.txt", created_by=staff, workspace=workspace)
    assert services.task_run_scheduled(task_id=task.pk) is None
    assert not Run.objects.exists()
    assert f"recurring task {task.pk}: no run this time" in caplog.text
    settings.DISK_QUOTA_MB = 2
    assert services.task_run_scheduled(task_id=task.pk).sandbox_bytes == 700 * KB


def test_no_quota_accepts_whatever_is_used(client, staff, settings):
    settings.DISK_QUOTA_MB = 0
    _uploads_of(staff, 5 * MB)
    response = _upload(client, staff, 300 * KB)
    assert response.status_code == 302
    assert 'id="disk-usage"' not in client.get(URL).content.decode()


def test_the_task_form_shows_their_usage_and_quota(client, staff, settings):
    settings.DISK_QUOTA_MB = 3
    _uploads_of(staff, 600 * KB)
    _uploads_of(make_user("other", "staff"), 900 * KB, name="upload-theirs")  # not theirs: not counted
    make_finished_run(user=staff, sandbox_bytes=200 * KB, started_at=timezone.now())
    client.force_login(staff)
    text = _page_text(client.get(URL))
    assert (
        f"Your files take {filesizeformat(800 * KB)} of your {filesizeformat(3 * MB)} quota: "
        f"uploads {filesizeformat(600 * KB)}, copies your runs work on {filesizeformat(200 * KB)}."
    ) in text


def test_a_runs_sandbox_is_measured_when_it_ends(staff, demo_workspace):
    run = services.task_submit(user=staff, text="Summarise report.txt", kind="file_analysis", workspace=demo_workspace)
    assert run.sandbox_bytes == demo_workspace.size_bytes > 0  # reserved: the copy it will get
    (sandbox_path(run)).mkdir(parents=True)
    (sandbox_path(run) / "extra.txt").write_bytes(b"y" * 5000)  # as a tool would have written
    execute_run(run.pk)
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED
    assert run.sandbox_bytes == folder_bytes(sandbox_path(run)) == 5000  # kept as it was: a resumed run's


def test_a_fresh_runs_sandbox_is_its_workspaces_copy(staff, demo_workspace):
    run = services.task_submit(user=staff, text="Summarise report.txt", kind="file_analysis", workspace=demo_workspace)
    execute_run(run.pk)
    run.refresh_from_db()
    assert run.sandbox_bytes == folder_bytes(sandbox_path(run)) >= demo_workspace.size_bytes


def test_deleting_an_upload_workspace_removes_its_folder_and_frees_the_quota(
    staff, demo_workspace, django_capture_on_commit_callbacks
):
    upload = _uploads_of(staff, 600 * KB)
    with django_capture_on_commit_callbacks(execute=True):
        upload.delete()  # in the admin, or with its owner
        demo_workspace.delete()
    assert not upload.path.exists() and usage_of(staff).total == 0
    assert (demo_workspace.path / "report.txt").exists()  # a shared one's folder is whoever put it there's


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
def test_submissions_at_the_same_moment_cannot_all_pass_the_quota(settings, sent_tasks):
    """Four submissions of one person at once, each needing 600 KB of a 1 MB quota: the check
    holds their row, so exactly one is written."""
    settings.DISK_QUOTA_MB = 1
    staff = make_user("burst", "staff")
    barrier, outcomes = threading.Barrier(4), []

    def submit() -> None:
        try:
            barrier.wait()
            services.task_submit(user=staff, text="Summarise notes.txt", kind="general", files=[_file(300 * KB)])
            outcomes.append("run")
        except QuotaExceeded:
            outcomes.append("refused")
        finally:
            connection.close()

    threads = [threading.Thread(target=submit) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["refused", "refused", "refused", "run"]
    assert Run.objects.count() == 1 and Workspace.objects.filter(owner=staff).count() == 1
    assert len(list(settings.WORKSPACES_ROOT.iterdir())) == 1


def test_an_old_sandbox_whose_run_never_started_frees_its_reservation(staff, demo_workspace):
    from feedback.retention import sandboxes_clean

    run = services.task_submit(user=staff, text="Summarise report.txt", kind="file_analysis", workspace=demo_workspace)
    services.run_cancel(run=run, user=staff)
    assert Run.objects.get(pk=run.pk).sandbox_bytes == demo_workspace.size_bytes
    sandboxes_clean(now=timezone.now() + timedelta(minutes=1))
    assert Run.objects.get(pk=run.pk).sandbox_bytes is None
