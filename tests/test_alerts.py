"""Alerts (feedback/alerts/) on real parts: one notification per opening and per resolution to a real
webhook receiver (an HTTP server started here) and through Django's mail, retries, evaluations at the
same moment on PostgreSQL, and the history and rules pages. Each kind of rule: test_alert_rules.py."""

import threading
from datetime import timedelta

import pytest
from django.core import mail
from django.db import connection
from django.db.models import F
from django.urls import reverse

import feedback.tasks  # noqa: F401  (registers the tasks the worker fixture runs)
from feedback import queue
from feedback.alerts import alert_deliver, alerts_evaluate
from feedback.models import (
    AlertDelivery,
    AlertIncident,
    Run,
)

from .alerting import SCORE_DROP, _attempts, _minutes_ago, _rule, _scored, _stuck_rule

# isort: split
from .alerting import alert_settings_fixture, evaluate_fixture, worker_fixture  # noqa: F401 (the fixtures)
from .factories import make_run
from .webhook_receiver import Received, WebhookReceiver, verify

pytestmark = pytest.mark.django_db


# --- delivery: one notification per opening and per resolution ------------------------------------
def test_a_webhook_receiver_gets_one_open_and_one_resolve_post_per_incident_and_a_new_one_when_it_returns(evaluate):
    with WebhookReceiver() as receiver:
        rule = _rule(SCORE_DROP, name="Scores fell", threshold=0.6, min_runs=5, webhook_urls=receiver.url)
        _scored(6, 0.3)
        evaluate(times=5)
        assert len(receiver.received) == 1  # five evaluations, one incident, one POST
        _scored(20, 0.9)  # the average is back at 0.76
        evaluate(times=5)
        assert len(receiver.received) == 2
        opened, resolved = receiver.received
        _scored(40, 0.1)  # and down again, to 0.36: a new incident
        evaluate(times=3)
        assert len(receiver.received) == 3

    assert all(verify(rule.secret, request) for request in receiver.received)
    forged = Received(opened.headers, opened.body.replace(b'"value":0.3', b'"value":0.9'))
    assert forged.body != opened.body and not verify(rule.secret, forged)
    assert not verify("another rule's secret", opened)

    first = AlertIncident.objects.order_by("id").first()
    assert (
        opened.headers["X-Feedback-Event"] == "alert.open" and resolved.headers["X-Feedback-Event"] == "alert.resolve"
    )
    assert opened.json["state"] == "open" and resolved.json["state"] == "resolved"
    assert opened.json["incident"]["id"] == resolved.json["incident"]["id"] == first.pk
    assert opened.json["rule"] == {"id": rule.pk, "name": "Scores fell", "kind": "score_drop"}
    assert opened.json["subject"] == "all" and opened.json["subject_label"] == "all runs"
    assert opened.json["figures"]["value"] == pytest.approx(0.3) and opened.json["figures"]["runs"] == 6
    assert opened.json["summary"].startswith("Average score 0.30 over the last 60 minutes (6 runs)")
    assert resolved.json["figures"]["value"] == pytest.approx(0.7615, abs=1e-3)
    assert resolved.json["incident"]["resolved_at"] and opened.json["incident"]["resolved_at"] is None
    assert opened.json["url"] == "https://feedback.example.org/metrics/?days=7"
    assert opened.json["history_url"] == f"https://feedback.example.org/alerts/?rule={rule.pk}#incident-{first.pk}"
    again = receiver.received[2].json
    assert again["state"] == "open" and again["incident"]["id"] != first.pk
    assert list(AlertIncident.objects.order_by("id").values_list("state", flat=True)) == ["resolved", "open"]


def test_a_receiver_answering_500_then_200_gets_the_retry(evaluate):
    with WebhookReceiver() as receiver:
        receiver.script = [500]
        _stuck_rule(webhook_urls=receiver.url)
        make_run(created_at=_minutes_ago(20))
        evaluate(times=3)
    first, second = receiver.received
    assert first.body == second.body  # the same notification, retried
    assert first.headers["X-Feedback-Delivery"] == second.headers["X-Feedback-Delivery"]
    delivery = AlertDelivery.objects.get()
    assert delivery.status == "delivered" and delivery.attempts == 2
    assert _attempts(delivery) == [(1, 500, "retry"), (2, 200, "delivered")]


def test_a_4xx_is_not_retried_and_a_timeout_is_until_the_last_attempt(evaluate, settings):
    settings.ALERT_DELIVERY_TIMEOUT_SECONDS = 0.3
    settings.ALERT_DELIVERY_MAX_ATTEMPTS = 3
    with WebhookReceiver() as refusing, WebhookReceiver() as slow:
        refusing.script = [404]
        slow.delay = 1.5
        _stuck_rule(webhook_urls=f"{refusing.url}\n{slow.url}")
        make_run(created_at=_minutes_ago(20))
        evaluate()
        assert len(refusing.received) == 1 and len(slow.received) == 3
    refused = AlertDelivery.objects.get(target=refusing.url)
    assert refused.status == "failed" and _attempts(refused) == [(1, 404, "failed")]
    late = AlertDelivery.objects.get(target=slow.url)
    assert late.status == "failed"
    assert _attempts(late) == [(1, None, "retry"), (2, None, "retry"), (3, None, "failed")]
    assert set(late.attempt_rows.values_list("error", flat=True)) == {"no answer within 0.3 s"}


def test_email_goes_through_django_mail_once_when_an_incident_opens_and_once_when_it_resolves(evaluate):
    _stuck_rule(name="Queue", emails="ops@example.com\noncall@example.com")
    run = make_run(created_at=_minutes_ago(20))
    evaluate(times=3)
    assert sorted(message.to for message in mail.outbox) == [["oncall@example.com"], ["ops@example.com"]]
    message = mail.outbox[0]
    assert message.subject == "[Alert Open] Queue: queued runs"
    assert f"1 run queued longer than 15 minutes; the oldest, run #{run.pk}, for 20 minutes." in message.body
    assert "Look: https://feedback.example.org/runs/?status=queued" in message.body
    assert message.extra_headers["X-Feedback-Delivery"]
    Run.objects.filter(pk=run.pk).update(status=Run.Status.CANCELLED)
    evaluate(times=3)
    assert len(mail.outbox) == 4
    resolved = mail.outbox[2]
    assert resolved.subject == "[Alert Resolved] Queue: queued runs"
    assert resolved.body.startswith("No run queued longer than 15 minutes.")


def test_email_with_the_embedded_default_s_file_backend_lands_in_its_folder(evaluate, settings, tmp_path):
    settings.EMAIL_BACKEND = "django.core.mail.backends.filebased.EmailBackend"
    settings.EMAIL_FILE_PATH = tmp_path / "mail"
    _stuck_rule(name="Queue", emails="ops@example.com")
    make_run(created_at=_minutes_ago(20))
    evaluate(times=2)
    (written,) = (tmp_path / "mail").iterdir()
    text = written.read_text()
    assert "Subject: [Alert Open] Queue: queued runs" in text and "To: ops@example.com" in text
    assert "Look: https://feedback.example.org/runs/?status=queued" in text
    assert AlertDelivery.objects.get().status == "delivered"


def test_a_lost_notification_is_sent_again_once_and_a_duplicate_message_sends_nothing(evaluate, worker):
    with WebhookReceiver() as receiver:
        _stuck_rule(webhook_urls=receiver.url)
        make_run(created_at=_minutes_ago(20))
        worker.lose_messages = True  # the broker loses the message queued at the opening
        evaluate()
        worker.lose_messages = False
        evaluate()
        assert receiver.received == []  # not overdue yet: still in the queue, for all beat knows
        AlertDelivery.objects.update(next_attempt_at=F("next_attempt_at") - timedelta(minutes=3))
        evaluate(times=3)
        assert len(receiver.received) == 1
        delivery = AlertDelivery.objects.get()
        assert alert_deliver(delivery_id=delivery.pk) is None  # a redelivered message: nothing to do
        assert len(receiver.received) == 1 and _attempts(delivery) == [(1, 200, "delivered")]
    assert [name for name, _args in worker.sent] == [queue.ALERT_DELIVER] * 2


def test_disabling_a_rule_resolves_its_open_incident_once(evaluate):
    rule = _stuck_rule(emails="ops@example.com")
    make_run(created_at=_minutes_ago(20))
    evaluate()
    rule.enabled = False
    rule.save()
    evaluate(times=3)
    incident = AlertIncident.objects.get()
    assert incident.state == "resolved" and incident.resolved_figures == {"reason": "rule_disabled"}
    assert [m.subject.split("]")[0] for m in mail.outbox] == ["[Alert Open", "[Alert Resolved"]
    assert mail.outbox[1].body.startswith("The rule was disabled.")


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
def test_evaluations_at_the_same_moment_open_and_resolve_an_incident_once(sent_tasks, caplog):
    """Four beats at once, three times, on separate connections: one incident, one notification
    per channel at its opening and one at its resolution, and no evaluation failing on the way."""
    _stuck_rule(webhook_urls="https://hooks.example.org/alerts", emails="ops@example.com")
    run = make_run(created_at=_minutes_ago(20))

    def at_once(count: int = 4) -> list[str]:
        barrier = threading.Barrier(count)
        failures = []

        def evaluate() -> None:
            try:
                barrier.wait()
                alerts_evaluate()
            except Exception as exc:
                failures.append(repr(exc))
            finally:
                connection.close()

        threads = [threading.Thread(target=evaluate) for _ in range(count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return failures

    for _ in range(3):
        assert at_once() == []
    assert AlertIncident.objects.count() == 1
    assert AlertDelivery.objects.filter(event="open").count() == 2
    Run.objects.filter(pk=run.pk).update(status=Run.Status.CANCELLED)
    for _ in range(3):
        assert at_once() == []
    incident = AlertIncident.objects.get()
    assert incident.state == "resolved"
    assert sorted(incident.deliveries.values_list("event", "channel")) == [
        ("open", "email"),
        ("open", "webhook"),
        ("resolve", "email"),
        ("resolve", "webhook"),
    ]
    assert [name for name, _args, _kwargs in sent_tasks] == [queue.ALERT_DELIVER] * 4
    assert "could not be evaluated" not in caplog.text  # no second resolution stopped by a constraint


# --- the pages ---------------------------------------------------------------------------------------
def test_the_history_page_shows_incidents_newest_first_with_every_delivery_attempt(
    client, operator, evaluate, settings
):
    settings.ALERT_DELIVERY_MAX_ATTEMPTS = 2
    with WebhookReceiver() as working, WebhookReceiver() as broken:
        broken.script = [503, 503, 503, 503]
        queue_rule = _stuck_rule(
            name="Queue <stuck>", webhook_urls=f"{working.url}\n{broken.url}", emails="ops@example.com"
        )
        run = make_run(created_at=_minutes_ago(20))
        evaluate()
        score_rule = _rule(SCORE_DROP, name="Scores", threshold=0.6, min_runs=2)
        _scored(2, 0.1)
        evaluate()
        Run.objects.filter(pk=run.pk).update(status=Run.Status.CANCELLED)
        evaluate()
        # The broken receiver held nothing up: the others got the opening and the resolution.
        assert len(working.received) == 2 and len(mail.outbox) == 2 and len(broken.received) == 4
    queued = AlertIncident.objects.get(rule=queue_rule)
    scores = AlertIncident.objects.get(rule=score_rule)

    client.force_login(operator)
    html = client.get(reverse("feedback-alert-list")).content.decode()
    assert f'href="{reverse("feedback-alert-list")}" aria-current="page">Alerts</a>' in html
    assert html.index(f'id="incident-{scores.pk}"') < html.index(f'id="incident-{queued.pk}"')  # newest first
    assert "<strong>Queue &lt;stuck&gt;</strong>" in html and "<script" not in html.split('id="alert-incidents"')[1]
    assert '<span class="badge incident-resolved">Resolved</span>' in html
    assert '<span class="badge incident-open">Open</span>' in html
    assert f"1 run queued longer than 15 minutes; the oldest, run #{run.pk}, for 20 minutes." in html
    assert "No run queued longer than 15 minutes." in html
    assert "Average score 0.10 over the last 60 minutes (2 runs)" in html
    assert "Still open; the condition still held at" in html
    assert f"&quot;oldest_run&quot;: {run.pk}," in html and "&quot;limit_minutes&quot;: 15" in html  # raw figures
    port = broken.url.split(":")[2].split("/")[0]
    for delivery in queued.deliveries.all():
        row = html.split(f'id="delivery-{delivery.pk}"')[1].split("</tr>")[0]
        if delivery.target == broken.url:
            assert f"http://127.0.0.1:{port}/…" in row and '<span class="badge delivery-failed">Failed</span>' in row
            assert row.count("<code>503</code>") == 2 and row.count("HTTP 503 Service Unavailable") == 2
            assert "Failed, retried" in row
        else:
            assert '<span class="badge delivery-delivered">Delivered</span>' in row
            assert (delivery.target == "ops@example.com") == ("ops@example.com" in row)
    assert "/hooks/alerts" not in html and queue_rule.secret not in html  # a webhook's path may be its secret
    assert html.count('id="delivery-') == 6

    only_open = client.get(reverse("feedback-alert-list"), {"state": "open"}).content.decode()
    assert f'id="incident-{scores.pk}"' in only_open and f'id="incident-{queued.pk}"' not in only_open
    fragment = client.get(reverse("feedback-alert-list"), {"rule": queue_rule.pk}, headers={"HX-Request": "true"})
    text = fragment.content.decode()
    assert text.lstrip().startswith('<div id="alert-incidents"') and "<html" not in text
    assert f'id="incident-{queued.pk}"' in text and f'id="incident-{scores.pk}"' not in text
    refused = client.get(reverse("feedback-alert-list"), {"state": "<b>x</b>"}).content.decode()
    assert "A filter was not valid and is left out" in refused and "<b>x</b>" not in refused


def test_the_rules_page_lists_each_rule_its_condition_and_channels_without_secrets(client, reviewer, admin_user):
    slack = "https://hooks.slack.com/services/T000/B000/SECRETPATH"
    rule = _rule(
        SCORE_DROP,
        name="Arithmetic scores",
        task_kind="arithmetic",
        threshold=0.6,
        change=0.2,
        webhook_urls=slack,
        emails="ops@example.com",
    )
    _stuck_rule(name="Queue", enabled=False)
    client.force_login(reviewer)
    html = client.get(reverse("feedback-alert-rule-list")).content.decode()
    row = html.split(f'id="alert-rule-{rule.pk}"')[1].split("</tr>")[0]
    assert "<td>Arithmetic scores</td>" in row and "<td>Score drop</td>" in row
    assert "Arithmetic; the last 60 minutes; below 0.6; dropped by 0.2 against the window before; judged from 10" in row
    assert "https://hooks.slack.com/…" in row and "ops@example.com" in row
    assert "SECRETPATH" not in html and rule.secret not in html
    assert ">queued longer than 15 minutes</td>" in html and '<span class="badge">No</span>' in html
    assert reverse("feedback-settings-alert-rule-edit", args=[rule.pk]) not in html  # a reviewer edits no rule
    client.force_login(admin_user)
    assert (
        reverse("feedback-settings-alert-rule-edit", args=[rule.pk])
        in client.get(reverse("feedback-alert-rule-list")).content.decode()
    )
