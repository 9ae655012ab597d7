"""Issue 22, point 5: the disk figures of the metrics page and of the API's metrics: what the
workspaces and the run sandboxes take, the sandboxes kept and the oldest, the retention and its
next clean-up, the quota and the people nearest it; all from the sizes recorded, no walk of the disk."""

import html
from datetime import timedelta

import pytest
from django.template.defaultfilters import filesizeformat
from django.urls import reverse
from django.utils import timezone
from django_celery_beat.models import IntervalSchedule, PeriodicTask

from feedback.models import Run, Workspace
from feedback.quota import MB

from .api_helpers import call, token_for
from .conftest import make_user
from .factories import make_finished_run, make_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def disk(settings):
    settings.DISK_QUOTA_MB = 100
    settings.RUN_SANDBOX_RETENTION_DAYS = 14
    now = timezone.now()
    alice, bob = make_user("alice", "staff"), make_user("bob", "staff")
    Workspace.objects.create(name="upload-alice", owner=alice, size_bytes=3 * MB)
    Workspace.objects.create(name="upload-bob", owner=bob, size_bytes=MB)
    Workspace.objects.create(name="shared", size_bytes=MB // 2)
    Workspace.objects.create(name="by-hand")  # not measured yet
    oldest = make_finished_run(user=alice, sandbox_bytes=2 * MB, finished_at=now - timedelta(days=3))
    make_finished_run(user=alice, sandbox_bytes=MB, finished_at=now - timedelta(days=1))
    make_run(user=bob, status=Run.Status.RUNNING, sandbox_bytes=MB)
    make_finished_run(user=bob, sandbox_bytes=50 * MB, finished_at=now - timedelta(days=20), sandbox_deleted_at=now)
    every_hour, _ = IntervalSchedule.objects.get_or_create(every=3600, period=IntervalSchedule.SECONDS)
    PeriodicTask.objects.create(
        name="clean-run-sandboxes",
        task="feedback.tasks.run_sandboxes_clean_task",
        interval=every_hour,
        last_run_at=now - timedelta(minutes=20),
    )
    return {"oldest": oldest, "now": now}


def test_the_metrics_page_shows_the_disk_figures(client, operator, disk):
    client.force_login(operator)
    page = html.unescape(client.get(reverse("feedback-metrics")).content.decode())
    assert f'id="disk-workspaces">{filesizeformat(4.5 * MB)}<' in page
    assert "4 workspaces, 2 of uploads · 1 not measured yet" in page
    # Kept: alice's two and bob's running one; bob's removed one is not.
    assert f'id="disk-sandboxes">{filesizeformat(4 * MB)}<' in page
    assert 'id="disk-sandboxes-kept">3 kept, 1 of active runs<' in page
    assert 'id="disk-retention">14 days<' in page
    next_cleanup = timezone.localtime(disk["now"] + timedelta(minutes=40))
    assert f"next clean-up {next_cleanup:%Y-%m-%d %H:%M}" in page
    assert f'id="disk-quota">{filesizeformat(100 * MB)}<' in page
    oldest = disk["oldest"]
    due = timezone.localtime(oldest.finished_at + timedelta(days=14))
    assert f"run #{oldest.pk}</a>, ended {timezone.localtime(oldest.finished_at):%Y-%m-%d %H:%M}" in page
    assert f"due for removal at {due:%Y-%m-%d %H:%M}" in page
    table = page[page.index('id="disk-nearest"') :]
    rows = [row.split("</td>")[0].split("<td>")[-1] for row in table.split("<tr>")[2:]]
    assert rows == ["alice", "bob"]
    assert f'<td>alice</td><td class="num">{filesizeformat(3 * MB)}</td>' in table
    assert f'<td class="num">{filesizeformat(6 * MB)}</td><td class="num">6 %</td>' in table
    assert f'<td class="num">{filesizeformat(2 * MB)}</td><td class="num">2 %</td>' in table


def test_the_metrics_page_says_when_nothing_is_kept_and_there_is_no_quota(client, operator, settings):
    settings.DISK_QUOTA_MB = 0
    settings.RUN_SANDBOX_RETENTION_DAYS = 0
    client.force_login(operator)
    page = html.unescape(client.get(reverse("feedback-metrics")).content.decode())
    assert 'id="disk-quota">none<' in page and 'id="disk-retention">forever<' in page
    assert "no clean-up" in page
    assert "No sandbox of an ended run is kept." in page and "Nobody has uploads or sandboxes kept." in page


def test_the_api_metrics_carry_the_disk_figures(client, reviewer, disk):
    response = call(client, "GET", "/metrics", token=token_for(reviewer))
    assert response.status_code == 200, response.content
    figures = response.json()["disk"]
    assert figures["workspaces_bytes"] == 4.5 * MB and figures["unmeasured_workspaces"] == 1
    assert figures["sandboxes_bytes"] == 4 * MB and figures["sandboxes_kept"] == 3
    assert figures["sandboxes_of_active_runs"] == 1
    assert figures["oldest_sandbox_run_id"] == disk["oldest"].pk
    assert figures["retention_days"] == 14 and figures["quota_bytes"] == 100 * MB
    assert [(p["user"], p["total"], p["share"]) for p in figures["nearest_quota"]] == [
        ("alice", 6 * MB, 0.06),
        ("bob", 2 * MB, 0.02),
    ]
    assert figures["next_cleanup_at"] is not None
