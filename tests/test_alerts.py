"""Alerts (feedback/alerts/) on real parts: rules of every kind opening on runs made the way the
agent makes them, one notification per opening and per resolution to a real webhook receiver (an
HTTP server started here) and through Django's mail, retries, evaluations at the same moment on
PostgreSQL, and the history page."""

import threading
from datetime import timedelta

import pytest
from django.core import mail
from django.core.exceptions import ValidationError
from django.db import connection
from django.db.models import F
from django.urls import reverse
from django.utils import timezone

import feedback.tasks  # noqa: F401  (registers the tasks the worker fixture runs)
from agentsite.celery import app
from feedback import queue
from feedback.alerts import alert_deliver, alerts_evaluate
from feedback.models import (
    AlertDelivery,
    AlertIncident,
    AlertRule,
    AppliedStrategy,
    Run,
    Step,
    Strategy,
    Task,
    ToolConfirmation,
)
from feedback.strategies.trials import check_trials

from .factories import make_finished_run, make_run
from .test_strategy_lifecycle import make_strategy
from .webhook_receiver import Received, WebhookReceiver, verify

pytestmark = pytest.mark.django_db

SCORE_DROP, ERROR_RATE = AlertRule.Kind.SCORE_DROP, AlertRule.Kind.ERROR_RATE
HARMFUL_TRIAL, STUCK_QUEUE = AlertRule.Kind.HARMFUL_TRIAL, AlertRule.Kind.STUCK_QUEUE


@pytest.fixture(autouse=True)
def _alert_settings(settings):
    settings.ALERT_RETRY_BACKOFF_SECONDS = 0  # a retry at once: that it happens is tested, not its wait
    settings.SITE_URL = "https://feedback.example.org"
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"


class InlineWorker:
    """Runs the tasks queued through feedback/queue.py in this process, as a worker runs them
    (Celery's own ``apply``); ``lose_messages`` drops them instead, like a broker that lost them."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, tuple]] = []
        self.lose_messages = False

    def send_task(self, name, args=(), kwargs=None, **options):
        self.sent.append((name, tuple(args or ())))
        if not self.lose_messages:
            # Not throw=True: an eager retry (autoretry_for) is then raised instead of made.
            result = app.tasks[name].apply(args=args, kwargs=kwargs or {})
            if result.failed():
                raise result.result


@pytest.fixture
def worker(monkeypatch):
    inline = InlineWorker()
    monkeypatch.setattr(app, "send_task", inline.send_task)
    return inline


@pytest.fixture
def evaluate(django_capture_on_commit_callbacks, worker):
    """Beat's job, ``times`` times; what it queues runs once its transaction commits."""

    def run(times: int = 1) -> None:
        for _ in range(times):
            with django_capture_on_commit_callbacks(execute=True):
                alerts_evaluate()

    return run


def _rule(kind: str, **fields) -> AlertRule:
    rule = AlertRule(name=fields.pop("name", f"{kind} rule"), kind=kind, **fields)
    rule.full_clean()
    rule.save()
    return rule


def _stuck_rule(**fields) -> AlertRule:
    return _rule(STUCK_QUEUE, queued_minutes=15, heartbeat_minutes=None, confirmation_minutes=None, **fields)


def _minutes_ago(minutes: float):
    return timezone.now() - timedelta(minutes=minutes)


def _scored(count: int, score: float, *, kind=Task.Kind.ARITHMETIC, minutes_ago: float = 10) -> list[Run]:
    return [make_finished_run(kind=kind, score=score, created_at=_minutes_ago(minutes_ago)) for _ in range(count)]


def _attempts(delivery: AlertDelivery) -> list[tuple]:
    return list(delivery.attempt_rows.values_list("number", "status_code", "outcome"))


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
        ("open", "email"), ("open", "webhook"), ("resolve", "email"), ("resolve", "webhook"),
    ]  # fmt: skip
    assert [name for name, _args, _kwargs in sent_tasks] == [queue.ALERT_DELIVER] * 4
    assert "could not be evaluated" not in caplog.text  # no second resolution stopped by a constraint


# --- each kind of rule, on real runs ----------------------------------------------------------------
def test_a_score_drop_opens_below_its_threshold_and_not_on_fewer_runs_than_its_minimum(evaluate):
    _rule(SCORE_DROP, threshold=0.6, min_runs=5)
    _scored(4, 0.2)
    _scored(10, 0.2, minutes_ago=70)  # before the window
    evaluate()
    assert not AlertIncident.objects.exists()
    _scored(1, 0.2)
    evaluate()
    incident = AlertIncident.objects.get()
    assert incident.subject == "all" and incident.state == "open"
    assert incident.figures["value"] == pytest.approx(0.2) and incident.figures["runs"] == 5
    assert incident.figures["reasons"] == ["threshold"]


def test_a_score_drop_against_the_window_before_opens_for_the_task_kind_that_dropped(evaluate):
    _rule(SCORE_DROP, task_kind=AlertRule.EACH_KIND, change=0.2, min_runs=5)
    for kind, before, now in ((Task.Kind.ARITHMETIC, 0.9, 0.5), (Task.Kind.FILE_ANALYSIS, 0.9, 0.85)):
        _scored(5, before, kind=kind, minutes_ago=90)
        _scored(5, now, kind=kind, minutes_ago=10)
    _scored(4, 0.1, kind=Task.Kind.GENERAL)  # too few runs to judge, before or now
    evaluate()
    incident = AlertIncident.objects.get()
    assert incident.subject == "arithmetic" and incident.figures["reasons"] == ["change"]
    assert incident.figures["previous_value"] == pytest.approx(0.9) and incident.figures["value"] == pytest.approx(0.5)


def _failed_call(run: Run, *, index: int = 0, error_class: str = "ToolError", signature: str = "") -> None:
    Step.objects.create(run=run, index=index, kind=Step.Kind.TOOL_CALL, tool_name="read_text_file", success=False,
                        error="No such file", error_class=error_class, error_signature=signature)  # fmt: skip


def test_an_error_rate_rise_opens_on_failed_runs_and_failed_calls_and_not_below_its_minimum(evaluate):
    _rule(ERROR_RATE, threshold=0.3, min_runs=6)
    at = _minutes_ago(10)
    for _ in range(2):
        make_finished_run(created_at=at)
    make_finished_run(created_at=at, status=Run.Status.FAILED)
    for _ in range(2):
        _failed_call(make_finished_run(created_at=at))
    make_run(created_at=at)  # still queued: not finished, not counted
    evaluate()
    assert not AlertIncident.objects.exists()  # 3 of 5 failing, but 5 runs are fewer than 6
    # A guardrail's refusal is a strategy at work, not a failure.
    _failed_call(make_finished_run(created_at=at), error_class="GuardrailRefused")
    evaluate()
    incident = AlertIncident.objects.get()
    assert incident.subject == "all" and incident.figures["measure"] == "failed_runs"
    assert (incident.figures["failing"], incident.figures["runs"]) == (3, 6)
    assert incident.figures["value"] == pytest.approx(0.5)


def test_a_repeated_error_rate_rise_against_the_window_before_opens(evaluate):
    _rule(ERROR_RATE, error_measure=AlertRule.ErrorMeasure.REPEATED_ERRORS, change=0.5, min_runs=3)
    for i in range(3):  # the hour before: three different errors, none seen earlier
        _failed_call(make_finished_run(created_at=_minutes_ago(90)), signature=f"sig-{i}")
    for i in range(3):  # this hour: the same three again
        _failed_call(make_finished_run(created_at=_minutes_ago(10)), signature=f"sig-{i}")
    evaluate()
    incident = AlertIncident.objects.get()
    assert incident.figures["measure"] == "repeated_errors" and incident.figures["reasons"] == ["change"]
    assert (incident.figures["repeated"], incident.figures["errors"]) == (3, 3)
    assert (incident.figures["value"], incident.figures["previous_value"]) == (1.0, 0.0)


def _on_trial(treatment: list[float], control: list[float]) -> Strategy:
    """A strategy on trial with a finished, scored run per score in each arm (as test_trial_trust.py)."""
    strategy = make_strategy(status="trial")
    Strategy.objects.filter(pk=strategy.pk).update(trial_started_at=_minutes_ago(24 * 60))
    _assign(strategy, treatment, control)
    strategy.refresh_from_db()
    return strategy


def _assign(strategy: Strategy, treatment: list[float], control: list[float]) -> None:
    start = _minutes_ago(60)
    for arm, scores in (("treatment", treatment), ("control", control)):
        for i, score in enumerate(scores):
            run = make_run(status=Run.Status.SUCCEEDED, score=score, tokens_in=400, tokens_out=50,
                           started_at=start, finished_at=start + timedelta(seconds=2 + i % 3))  # fmt: skip
            AppliedStrategy.objects.create(run=run, strategy_version=strategy.current_version, arm=arm)


def test_a_harmful_trial_opens_on_harm_and_on_a_mismatched_split_and_resolves_once_rolled_back(evaluate, settings):
    settings.STRATEGY_TRIAL_MIN_SAMPLES = 10
    _rule(HARMFUL_TRIAL, min_runs=30)
    harmful = _on_trial([0.3, 0.4, 0.35] * 4, [0.8, 0.9, 0.85] * 4)  # worse; 24 runs
    skewed = _on_trial([0.8, 0.85, 0.9] * 15, [0.8, 0.9, 0.85] * 5)  # as good; 45/15 at a share of 0.5
    evaluate()
    assert list(AlertIncident.objects.values_list("subject", flat=True)) == [f"strategy-{skewed.pk}-split"]
    _assign(harmful, [0.3, 0.4, 0.35], [0.8, 0.9, 0.85])  # 30 runs: judged
    evaluate()
    harm = AlertIncident.objects.get(subject=f"strategy-{harmful.pk}-harm")
    assert harm.figures["scores_worse"] is True and harm.figures["ci_high"] < 0
    assert (harm.figures["treatment_n"], harm.figures["control_n"]) == (15, 15)
    split = AlertIncident.objects.get(subject=f"strategy-{skewed.pk}-split").figures
    assert (split["treatment"], split["control"], split["p_value"] < 0.01) == (45, 15, True)
    assert AlertIncident.objects.count() == 2  # no harm in the skewed trial, no mismatch in the harmful one

    assert check_trials() == [harmful.pk]  # beat's automatic roll-back (never of the mismatched split)
    evaluate()
    harm.refresh_from_db()
    assert harm.state == "resolved"
    assert harm.resolved_figures == {"reason": "not_on_trial", "strategy": harmful.pk, "title": harmful.title,
                                     "status": "rolled_back"}  # fmt: skip


def _confirmation(run: Run, **fields) -> ToolConfirmation:
    return ToolConfirmation.objects.create(run=run, turn=1, tool_call_id="c1", tool_name="send_reply", **fields)


def test_a_stuck_queued_run_and_an_old_awaiting_confirmation_open_the_stuck_queue_rule(evaluate):
    _rule(STUCK_QUEUE, queued_minutes=15, heartbeat_minutes=5, confirmation_minutes=60)
    stuck = make_run(created_at=_minutes_ago(20))
    make_run(created_at=_minutes_ago(2))  # queued a moment ago
    # Queued again a minute ago, after a reviewer's approval: waiting since then, not since it was created.
    resumed = make_run(created_at=_minutes_ago(180), started_at=_minutes_ago(180))
    _confirmation(resumed, requested_at=_minutes_ago(120), status="approved", decided_at=_minutes_ago(1))
    waiting = make_run(status=Run.Status.AWAITING_CONFIRMATION, created_at=_minutes_ago(180))
    _confirmation(waiting, requested_at=_minutes_ago(120))
    _confirmation(make_run(status=Run.Status.AWAITING_CONFIRMATION), requested_at=_minutes_ago(10))
    silent = make_run(status=Run.Status.RUNNING, started_at=_minutes_ago(30), heartbeat_at=_minutes_ago(10))
    make_run(status=Run.Status.RUNNING, started_at=_minutes_ago(30), heartbeat_at=_minutes_ago(0.05))
    evaluate()
    found = {incident.subject: incident.figures for incident in AlertIncident.objects.all()}
    assert found["queued"]["run_ids"] == [stuck.pk] and found["queued"]["oldest_minutes"] == 20
    assert found["awaiting_confirmation"]["run_ids"] == [waiting.pk]
    assert found["awaiting_confirmation"]["oldest_minutes"] == 120
    assert found["running"]["run_ids"] == [silent.pk]


def test_a_rule_s_parameters_are_checked():
    cases = [
        ({"kind": SCORE_DROP}, "threshold"),  # neither a threshold nor a change
        ({"kind": SCORE_DROP, "threshold": 1.5}, "threshold"),
        ({"kind": ERROR_RATE, "change": 0}, "change"),
        ({"kind": ERROR_RATE, "threshold": 0.2, "min_runs": 1}, "min_runs"),  # no rate of one run
        ({"kind": STUCK_QUEUE, "queued_minutes": None, "heartbeat_minutes": None, "confirmation_minutes": None},
         "queued_minutes"),
        ({"kind": HARMFUL_TRIAL, "task_kind": "arithmetic"}, "task_kind"),
        ({"kind": STUCK_QUEUE, "webhook_urls": "https://ok.example.org/hook\nftp://files.example.org/x"},
         "webhook_urls"),
        ({"kind": STUCK_QUEUE, "emails": "ops@example.com\nnot an address"}, "emails"),
    ]  # fmt: skip
    for fields, field in cases:
        with pytest.raises(ValidationError) as refused:
            AlertRule(name="r", **fields).full_clean()
        assert list(refused.value.message_dict) == [field], fields
    _rule(SCORE_DROP, threshold=0.5, webhook_urls="https://ok.example.org/hook", emails="ops@example.com")


# --- the pages ---------------------------------------------------------------------------------------
def test_the_history_page_shows_incidents_newest_first_with_every_delivery_attempt(client, operator, evaluate,
                                                                                    settings):  # fmt: skip
    settings.ALERT_DELIVERY_MAX_ATTEMPTS = 2
    with WebhookReceiver() as working, WebhookReceiver() as broken:
        broken.script = [503, 503, 503, 503]
        queue_rule = _stuck_rule(name="Queue <stuck>", webhook_urls=f"{working.url}\n{broken.url}",
                                 emails="ops@example.com")  # fmt: skip
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
    rule = _rule(SCORE_DROP, name="Arithmetic scores", task_kind="arithmetic", threshold=0.6, change=0.2,
                 webhook_urls=slack, emails="ops@example.com")  # fmt: skip
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
