"""Issue 22, point 5: the retention policy for run sandboxes (feedback/retention.py, beat's hourly
clean-up). The sandboxes of runs that ended more than RUN_SANDBOX_RETENTION_DAYS ago are removed
and their runs marked; never those of a run that is queued, running or waiting for a confirmation,
nor of one whose sub-agent runs are not all past the retention too."""

import html
from datetime import timedelta

import pytest
from django.conf import settings as django_settings
from django.urls import reverse
from django.utils import timezone

from agentsite.celery import app
from feedback import services
from feedback.agent.loop import execute_run
from feedback.agent.sandbox import sandbox_path
from feedback.models import Run, Task, Workspace
from feedback.retention import sandboxes_clean
from feedback.tasks import run_sandboxes_clean_task

from .factories import make_run

pytestmark = pytest.mark.django_db
NOW = timezone.now()


def _days_ago(days: float):
    return NOW - timedelta(days=days)


def _run(status=Run.Status.SUCCEEDED, *, ended: float | None, user=None, parent=None, **fields) -> Run:
    """A run created 40 days ago that ended ``ended`` days ago (None: it has not), with a sandbox."""
    run = make_run(
        user=user,
        status=status,
        parent=parent,
        created_at=_days_ago(40),
        started_at=_days_ago(40),
        finished_at=None if ended is None else _days_ago(ended),
        sandbox_bytes=None if parent else 5,
        **fields,
    )
    if parent is None:
        sandbox_path(run).mkdir(parents=True)
        (sandbox_path(run) / "notes.txt").write_text("hello")
    return run


@pytest.fixture
def runs(settings):
    settings.RUN_SANDBOX_RETENTION_DAYS = 14
    old_parent = _run(ended=20)
    finished_child = _run(ended=1, parent=old_parent)
    busy_parent = _run(Run.Status.FAILED, ended=30)
    return {
        "answered long ago": _run(ended=20),
        "failed long ago": _run(Run.Status.FAILED, ended=15),
        "cancelled long ago": _run(Run.Status.CANCELLED, ended=30),
        "answered recently": _run(ended=13),
        "queued": _run(Run.Status.QUEUED, ended=None),
        "running": _run(Run.Status.RUNNING, ended=None),
        "waiting for a confirmation": _run(Run.Status.AWAITING_CONFIRMATION, ended=None),
        "with a sub-agent that ended recently": old_parent,
        "with a sub-agent still running": busy_parent,
        "_children": [finished_child, _run(Run.Status.RUNNING, ended=None, parent=busy_parent)],
    }


GONE = {"answered long ago", "failed long ago", "cancelled long ago"}


def test_the_clean_up_removes_exactly_the_sandboxes_of_runs_that_ended_long_ago(runs, settings):
    stranger = settings.RUN_SANDBOXES_ROOT / "notes-of-someone"
    stranger.mkdir()
    outside = settings.RUN_SANDBOXES_ROOT.parent / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("not a sandbox")
    link_id = Run.objects.order_by("-pk").first().pk + 1000
    (settings.RUN_SANDBOXES_ROOT / str(link_id)).symlink_to(outside)
    named = {name: run for name, run in runs.items() if not name.startswith("_")}

    removed = sandboxes_clean(now=NOW)

    assert sorted(removed) == sorted(named[name].pk for name in GONE)
    for name, run in named.items():
        run.refresh_from_db()
        assert sandbox_path(run).exists() == (name not in GONE), name
        assert (run.sandbox_deleted_at == NOW) == (name in GONE), name
        assert run.sandbox_bytes == 5, name  # what was removed stays recorded
    assert stranger.is_dir() and (outside / "keep.txt").exists()


def test_the_clean_up_run_twice_removes_nothing_more(runs):
    first = sandboxes_clean(now=NOW)
    marks = dict(Run.objects.values_list("pk", "sandbox_deleted_at"))
    assert len(first) == len(GONE)
    assert sandboxes_clean(now=NOW + timedelta(hours=1)) == []
    assert dict(Run.objects.values_list("pk", "sandbox_deleted_at")) == marks
    kept = [run for name, run in runs.items() if not name.startswith("_") and name not in GONE]
    assert all(sandbox_path(run).exists() for run in kept)


def test_a_sandbox_already_gone_is_marked_and_a_retention_of_0_keeps_everything(runs, settings):
    settings.RUN_SANDBOX_RETENTION_DAYS = 0
    assert sandboxes_clean(now=NOW) == []
    assert not Run.objects.filter(sandbox_deleted_at__isnull=False).exists()
    settings.RUN_SANDBOX_RETENTION_DAYS = 14
    old = runs["answered long ago"]
    for path in sandbox_path(old).iterdir():  # half removed by a clean-up that died
        path.unlink()
    assert old.pk in sandboxes_clean(now=NOW)
    assert Run.objects.get(pk=old.pk).sandbox_deleted_at == NOW


def test_beat_runs_the_clean_up_hourly_and_it_measures_unmeasured_workspaces(runs, settings):
    entry = django_settings.CELERY_BEAT_SCHEDULE["clean-run-sandboxes"]
    assert entry == {"task": "feedback.tasks.run_sandboxes_clean_task", "schedule": 3600.0}
    assert entry["task"] in app.tasks
    by_hand = Workspace.objects.create(name="by-hand")  # put there by an operator: no size recorded
    by_hand.path.mkdir(parents=True)
    (by_hand.path / "a.txt").write_bytes(b"z" * 1234)
    run_sandboxes_clean_task.apply()  # no argument: nothing a person gives it
    assert not sandbox_path(runs["answered long ago"]).exists()
    assert sandbox_path(runs["answered recently"]).exists()
    assert Workspace.objects.get(pk=by_hand.pk).size_bytes == 1234


def test_a_rerun_of_a_run_whose_sandbox_was_removed_starts_from_the_tasks_workspace(staff, demo_workspace):
    run = services.task_submit(user=staff, text="Summarise report.txt", kind="file_analysis", workspace=demo_workspace)
    execute_run(run.pk)
    (sandbox_path(run) / "report.txt").write_text("changed by the run")
    Run.objects.filter(pk=run.pk).update(finished_at=_days_ago(20))
    assert sandboxes_clean() == [run.pk]
    again = services.run_rerun(run=Run.objects.get(pk=run.pk), user=staff)
    execute_run(again.pk)
    again.refresh_from_db()
    assert again.status == Run.Status.SUCCEEDED and again.task.workspace == demo_workspace
    assert (sandbox_path(again) / "report.txt").read_text() == (demo_workspace.path / "report.txt").read_text()


def test_the_run_page_says_when_its_files_go_and_that_they_were_removed(client, staff, settings):
    settings.RUN_SANDBOX_RETENTION_DAYS = 14
    recent, old = _run(ended=2, user=staff), _run(ended=20, user=staff)
    sandboxes_clean(now=NOW)
    client.force_login(staff)
    kept = html.unescape(client.get(reverse("feedback-run-detail", args=[recent.pk])).content.decode())
    due = timezone.localtime(recent.finished_at + timedelta(days=14)).strftime("%Y-%m-%d %H:%M")
    assert "Its own copy of the workspace (5\xa0bytes) is kept until " + due in kept
    gone = html.unescape(client.get(reverse("feedback-run-detail", args=[old.pk])).content.decode())
    removed = timezone.localtime(NOW).strftime("%Y-%m-%d %H:%M")
    assert f"Its copy of the workspace was removed on {removed} UTC, 20 days after the run ended, by the" in gone
    assert "is kept until" not in gone


def test_a_sub_agent_run_has_no_files_line_of_its_own(client, reviewer):
    parent = _run(ended=2)
    child = _run(ended=2, parent=parent)
    client.force_login(reviewer)
    assert 'id="run-sandbox"' in client.get(reverse("feedback-run-detail", args=[parent.pk])).content.decode()
    assert 'id="run-sandbox"' not in client.get(reverse("feedback-run-detail", args=[child.pk])).content.decode()


def test_a_folder_of_a_run_unknown_here_is_left_alone(settings):
    """A folder named as a run that has no row here (another database's run) is not ours to remove."""
    settings.RUN_SANDBOX_RETENTION_DAYS = 1
    (settings.RUN_SANDBOXES_ROOT / "999999").mkdir(parents=True)
    Task.objects.create(text="nothing")
    assert sandboxes_clean(now=NOW) == []
    assert (settings.RUN_SANDBOXES_ROOT / "999999").is_dir()
