"""What people rely on when they act through the site: a double click starts one job, a reviewer
sees what they are asked to confirm, a refusal says why, a schedule cannot flood the queue, and a
run's working time is not the time it waited for them."""

import json
import re
from datetime import timedelta
from html import unescape

import pytest
from django.urls import reverse
from django.utils import timezone

from feedback import tasks
from feedback.models import JobLock, Run, ToolConfirmation

from .factories import make_run

pytestmark = pytest.mark.django_db


# --- the demo loop ------------------------------------------------------------------------------
def test_a_double_clicked_demo_loop_queues_one_loop(client, reviewer, settings, monkeypatch, sent_tasks):
    settings.EMBEDDED_DATABASE = True  # the demo loop is offered by the embedded default only
    reports = []

    def sent() -> list[tuple]:
        return [args for name, args, _ in sent_tasks if name == "feedback.tasks.demo_loop_task"]

    client.force_login(reviewer)
    url = reverse("feedback-strategies-demo-loop")

    first = client.post(url, follow=True).content.decode()
    second = client.post(url, follow=True).content.decode()
    assert len(sent()) == 1, "the second click queued a second loop"
    assert "The demo loop is running in the worker" in first
    assert "A demo loop is already running, started at" in second and "nothing new was queued" in second
    lock = JobLock.objects.get()
    assert lock.acquired_by == reviewer
    # The page says so to whoever opens it, from the database (a restarted web process too).
    page = client.get(reverse("feedback-strategy-list")).content.decode()
    assert 'id="demo-running"' in page and f"started at {lock.acquired_at:%Y-%m-%d %H:%M:%S}" in page

    # The loop ends (here at once) and frees the lock, even when it fails: the next click queues.
    def demo_loop(**kwargs):
        reports.append(kwargs)
        raise RuntimeError("the loop broke")

    monkeypatch.setattr("feedback.strategies.demo.run_demo_loop", demo_loop)
    with pytest.raises(RuntimeError):
        tasks.demo_loop_task(*sent()[0])
    assert reports and not JobLock.objects.exists()
    assert 'id="demo-running"' not in client.get(reverse("feedback-strategy-list")).content.decode()
    client.post(url)
    assert len(sent()) == 2


# --- confirmations ------------------------------------------------------------------------------
def _waiting_confirmation(**fields) -> ToolConfirmation:
    run = make_run(status=Run.Status.AWAITING_CONFIRMATION)
    arguments = {"to": "someone@example.com", "subject": "Re: hi", "body": "Hello"}
    return ToolConfirmation.objects.create(run=run, turn=1, tool_call_id="c1", tool_name="send_reply",
                                           arguments=arguments, **fields)  # fmt: skip


def test_a_refusal_needs_a_reason_an_approval_does_not(client, reviewer):
    confirmation = _waiting_confirmation()
    client.force_login(reviewer)
    url = reverse("feedback-confirmation-decide", args=[confirmation.pk])
    for blank in ("", "   "):
        page = client.post(url, {"decision": "reject", "reason": blank}, follow=True).content.decode()
        assert "Say why you refuse this call." in page
        confirmation.refresh_from_db()
        assert confirmation.status == ToolConfirmation.Status.PENDING and confirmation.decided_by is None
    client.post(url, {"decision": "reject", "reason": "Not to this customer."})
    confirmation.refresh_from_db()
    assert confirmation.status == ToolConfirmation.Status.REJECTED and confirmation.reason == "Not to this customer."

    other = _waiting_confirmation()
    client.post(reverse("feedback-confirmation-decide", args=[other.pk]), {"decision": "approve", "reason": ""})
    other.refresh_from_db()
    assert other.status == ToolConfirmation.Status.APPROVED and other.reason == ""


# --- recurring tasks ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("cron", "gap"),
    [("* * * * *", 1), ("*/2 * * * *", 2), ("0-10 * * * *", 1), ("58,1 * * * *", 3), ("0,58 0,23 * * *", 2)],
)
def test_a_cron_schedule_firing_more_often_than_every_5_minutes_is_refused(client, staff, cron, gap):
    from django_celery_beat.models import PeriodicTask

    client.force_login(staff)
    data = {"kind": "arithmetic", "text": "What is 2 + 2?", "repeat": "cron", "cron": cron}
    response = client.post(reverse("feedback-task-submit"), data)
    assert response.status_code == 400
    assert f"This schedule has firings {gap} minute(s) apart; a task repeats at most every 5 minutes." in (
        response.content.decode()
    )
    assert not PeriodicTask.objects.filter(name__startswith="feedback-task-").exists() and not Run.objects.exists()


@pytest.mark.parametrize("cron", ["*/5 * * * *", "0 7 * * 1-5", "55 23,0 * * *", "0,58 0,23 1 * *"])
def test_a_cron_schedule_5_minutes_apart_or_more_is_accepted(client, staff, monkeypatch, cron):
    from django_celery_beat.models import PeriodicTask

    client.force_login(staff)
    data = {"kind": "arithmetic", "text": "What is 2 + 2?", "repeat": "cron", "cron": cron}
    assert client.post(reverse("feedback-task-submit"), data).status_code == 302
    entry = PeriodicTask.objects.get(name__startswith="feedback-task-")
    assert str(entry.crontab).startswith(cron)


# --- a run's time -------------------------------------------------------------------------------
def _times(html: str) -> tuple[str, str]:
    working = re.search(r'<dt>Working time</dt><dd id="run-elapsed">([\d.,]+ s)</dd>', html)
    waited = re.search(r'<dt>Waited for people</dt><dd id="run-waited">([\d.,]+ s)</dd>', html)
    assert working and waited, "the page shows no working time and time waited apart"
    return working[1], waited[1]


def _clock(html: str) -> tuple[int, list]:
    """What a live run's page gives the browser's clock (static/js/live.js): its start and its
    waits for people, in ms since the epoch; and that it shows both times apart, moved by it."""
    found = re.search(r'data-clock-started="(\d+)" data-clock-waits="([^"]*)"', html)
    assert found, "the page gives the browser no clock"
    assert '<dt>Working time</dt><dd id="run-elapsed" data-clock="working">' in html
    assert '<dt>Waited for people</dt><dd id="run-waited" data-clock="waited">' in html
    return int(found[1]), json.loads(unescape(found[2]))


def _ms(moment) -> int:
    return round(moment.timestamp() * 1000)


def test_a_runs_working_time_leaves_out_its_wait_for_a_reviewer(client, operator, monkeypatch):
    now = timezone.now()
    monkeypatch.setattr(timezone, "now", lambda: now)
    client.force_login(operator)

    # Ended: 12 minutes from start to end, 10 of them waiting for a reviewer's confirmation.
    ended = make_run(status=Run.Status.SUCCEEDED, started_at=now - timedelta(minutes=12), finished_at=now)
    ToolConfirmation.objects.create(
        run=ended, turn=1, tool_call_id="c1", tool_name="send_reply", status=ToolConfirmation.Status.APPROVED,
        requested_at=now - timedelta(minutes=11), decided_at=now - timedelta(minutes=1),
    )  # fmt: skip
    assert _times(client.get(reverse("feedback-run-detail", args=[ended.pk])).content.decode()) == (
        "120.0 s",
        "600.0 s",
    )

    # Waiting now: the browser's clock keeps its working time still while the time waited goes on
    # (tests/browser/test_waterfall.py watches it do so): the page gives it the start and the
    # waits, the pending ones open. Two calls of one turn wait together: their waits count once.
    started = now - timedelta(minutes=12)
    waiting = make_run(status=Run.Status.AWAITING_CONFIRMATION, started_at=started)
    asked = now - timedelta(minutes=2)
    for call in ("c1", "c2"):
        ToolConfirmation.objects.create(run=waiting, turn=1, tool_call_id=call, tool_name="send_reply",
                                        requested_at=asked)  # fmt: skip
    url = reverse("feedback-run-detail", args=[waiting.pk])
    assert _clock(client.get(url).content.decode()) == (_ms(started), [[_ms(asked), None], [_ms(asked), None]])
    summary = client.get(reverse("feedback-run-summary", args=[waiting.pk]), headers={"HX-Request": "true"})
    assert _clock(summary.content.decode()) == (_ms(started), [[_ms(asked), None], [_ms(asked), None]])

    # Approved and running again: the waits are closed, and the clock moves on from them.
    later = now + timedelta(seconds=30)
    ToolConfirmation.objects.filter(run=waiting).update(status="approved", decided_at=later)
    Run.objects.filter(pk=waiting.pk).update(status=Run.Status.RUNNING)
    assert _clock(client.get(url).content.decode()) == (_ms(started), [[_ms(asked), _ms(later)]] * 2)
    # Once it has ended, the page says the times themselves: 2 min 30 s waited of 12 min 35 s.
    Run.objects.filter(pk=waiting.pk).update(status=Run.Status.SUCCEEDED, finished_at=later + timedelta(seconds=5))
    assert _times(client.get(url).content.decode()) == ("605.0 s", "150.0 s")


def test_a_reviewer_confirms_a_reply_seeing_its_real_recipient_and_its_body_as_text(
    client, reviewer, operator, demo_workspace
):
    from feedback.agent.loop import execute_run
    from feedback.privacy import email_pseudonym

    run = make_run(text="Triage the emails in inbox/ and reply to the urgent ones", kind="email_triage",
                   workspace=demo_workspace)  # fmt: skip
    execute_run(run.pk)  # the offline model asks to reply to the urgent senders, and waits
    first = run.confirmations.order_by("pk").first()
    masked = email_pseudonym("ops@northwind.example")
    assert first.arguments["to"] == masked
    # A body with lines and markup, as a model may write it.
    first.arguments["body"] = "Dear team,\n\nWe are on it.\n<script>alert(1)</script>"
    first.save()

    client.force_login(reviewer)
    for url in (reverse("feedback-confirmation-list"), reverse("feedback-run-detail", args=[run.pk])):
        html = client.get(url).content.decode()
        card = html[html.index(f'id="confirmation-{first.pk}"') :]
        card = card[: card.index("</form>")]
        assert '<dt>Recipient</dt><dd class="prewrap">ops@northwind.example <span' in card
        assert masked not in card and "{&#x27;to&#x27;" not in card and "{'to'" not in card
        assert card.index("<dt>Recipient</dt>") < card.index("<dt>Subject</dt>") < card.index("<dt>Body</dt>")
        assert "Dear team,\n\nWe are on it.\n&lt;script&gt;alert(1)&lt;/script&gt;</dd>" in card
    # Who may not confirm sees the pseudonym; the stored row keeps it.
    client.force_login(operator)
    html = client.get(reverse("feedback-confirmation-list")).content.decode()
    assert masked in html and "ops@northwind.example" not in html
    first.refresh_from_db()
    assert first.arguments["to"] == masked
