"""One retry policy (feedback/retrying.py): every retry path tries a transient failure again and
records each attempt, never retries a permanent one, and gives up after its limit. In-process
retries are tenacity's (tool calls, the recorder's reconnects; model calls in
test_model_edge_adapter.py); tasks retry with Celery's autoretry (the OTel export, alert delivery).
"""

import logging
import uuid
from datetime import timedelta

import pytest
from django.db import IntegrityError, OperationalError
from django.utils import timezone

from agentsite.celery import app
from feedback.agent import invoker, recorder
from feedback.agent.tools import Tool, ToolContext, ToolError
from feedback.alerts import alert_deliver, alerts_evaluate
from feedback.alerts.delivery import alert_deliveries_resend
from feedback.metrics.daily import rebuild
from feedback.models import AlertDelivery, DailyRunStats, Run
from feedback.retrying import TransientError
from feedback.tasks import alert_deliver_task, evaluations_export_task, run_export_task

from .alerting import _attempts, _minutes_ago, _stuck_rule
from .factories import make_finished_run, make_run
from .otlp_receiver import OTLPReceiver
from .webhook_receiver import WebhookReceiver

SCHEMA = {"type": "object", "properties": {}, "additionalProperties": False}


# --- tool calls (tenacity, in the invoker) -------------------------------------------------------
def _tool(failures: list[ToolError], *, max_attempts: int = 3) -> tuple[Tool, list[int]]:
    """A tool raising ``failures`` one call after another, then answering; and its calls."""
    calls: list[int] = []

    def func(ctx):
        calls.append(1)
        if len(calls) <= len(failures):
            raise failures[len(calls) - 1]
        return {"ok": True}

    # A name of its own: the circuit breaker is shared (by name, in the cache) across tests.
    return Tool(f"flaky-{uuid.uuid4().hex[:8]}", "a flaky tool", SCHEMA, func, max_attempts=max_attempts), calls


@pytest.fixture
def no_waits(settings, monkeypatch):
    settings.TOOL_BACKOFF_SECONDS = 0
    monkeypatch.setattr(recorder, "DB_RETRY_SECONDS", 0)


def _invoke(tool: Tool, tmp_path) -> invoker.Outcome:
    return invoker.invoke(tool.name, "{}", ToolContext(1, tmp_path), {tool.name: tool})


def test_a_tool_call_is_retried_after_transient_errors_with_every_attempt_kept(no_waits, tmp_path):
    tool, calls = _tool([ToolError("busy", retryable=True), ToolError("still busy", retryable=True)])
    outcome = _invoke(tool, tmp_path)
    assert outcome.ok and outcome.result == {"ok": True} and len(calls) == 3
    assert [(a.number, a.error, a.retryable) for a in outcome.attempts] == [
        (1, "busy", True),
        (2, "still busy", True),
        (3, "", False),
    ]


def test_a_tool_call_failing_for_good_is_not_retried(no_waits, tmp_path):
    tool, calls = _tool([ToolError("no such file")])
    outcome = _invoke(tool, tmp_path)
    assert not outcome.ok and outcome.error == "no such file" and len(calls) == 1
    assert [(a.number, a.retryable) for a in outcome.attempts] == [(1, False)]


def test_a_tool_call_gives_up_after_its_attempts(no_waits, tmp_path):
    tool, calls = _tool([ToolError(f"busy {n}", retryable=True) for n in range(5)], max_attempts=3)
    outcome = _invoke(tool, tmp_path)
    assert not outcome.ok and outcome.retryable and outcome.error == "busy 2" and len(calls) == 3
    assert [a.number for a in outcome.attempts] == [1, 2, 3]


def test_a_tool_call_stops_retrying_once_its_breaker_opens(no_waits, settings, tmp_path):
    settings.TOOL_BREAKER_FAILURES = 2
    tool, calls = _tool([ToolError("down", retryable=True)] * 5, max_attempts=5)
    outcome = _invoke(tool, tmp_path)
    assert not outcome.ok and len(calls) == len(outcome.attempts) == 2


# --- the recorder's writes when the connection drops (tenacity) ----------------------------------
def _operation(failures: list[Exception]):
    calls: list[int] = []

    def operation() -> str:
        calls.append(1)
        if len(calls) <= len(failures):
            raise failures[len(calls) - 1]
        return "written"

    return operation, calls


@pytest.mark.django_db(transaction=True)  # outside a transaction: inside one nothing can be retried
def test_a_write_whose_connection_dropped_is_made_again_each_drop_logged(no_waits, caplog):
    operation, calls = _operation([OperationalError("server closed the connection")] * 2)
    with caplog.at_level(logging.WARNING, logger="feedback.agent.recorder"):
        assert recorder.retrying(operation, what="writing a step") == "written"
    assert len(calls) == 3
    assert [r.getMessage() for r in caplog.records] == [
        f"the database connection dropped while writing a step (attempt {n} of 4); retrying" for n in (1, 2)
    ]
    assert Run.objects.count() == 0  # the connection works again after the retries


@pytest.mark.django_db(transaction=True)
def test_a_write_refused_by_the_database_is_not_made_again(no_waits):
    operation, calls = _operation([IntegrityError("duplicate key")])
    with pytest.raises(IntegrityError):
        recorder.retrying(operation, what="writing a step")
    assert len(calls) == 1


@pytest.mark.django_db(transaction=True)
def test_a_write_gives_up_after_its_attempts(no_waits):
    operation, calls = _operation([OperationalError("gone")] * 10)
    with pytest.raises(OperationalError):
        recorder.retrying(operation, what="writing a step")
    assert len(calls) == recorder.DB_WRITE_ATTEMPTS


@pytest.mark.django_db(transaction=True)
def test_a_write_found_committed_after_a_drop_is_not_made_again(no_waits):
    operation, calls = _operation([OperationalError("no acknowledgement")])
    assert recorder.retrying(operation, what="writing a step", recover=lambda: "found") == "found"
    assert len(calls) == 1


# --- the tasks declare Celery's retries -----------------------------------------------------------
@pytest.mark.parametrize("task", [alert_deliver_task, run_export_task, evaluations_export_task])
def test_the_tasks_retry_by_celery_s_autoretry_with_backoff_and_jitter(task):
    assert task.autoretry_for and all(issubclass(error, TransientError) for error in task.autoretry_for)
    assert task.retry_backoff and task.retry_jitter is True and task.retry_backoff_max == 600


def test_the_tasks_bounds_are_read_from_settings_when_they_run(settings):
    settings.OTEL_EXPORT_RETRIES, settings.ALERT_DELIVERY_MAX_ATTEMPTS = 7, 4
    assert run_export_task.max_retries == evaluations_export_task.max_retries == 7
    assert alert_deliver_task.max_retries == 3  # the attempts after the first


# --- the OTel export (Celery autoretry) ----------------------------------------------------------
@pytest.fixture
def otlp(monkeypatch, settings):
    server = OTLPReceiver().start()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", server.endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "2")
    yield server
    server.stop()


def _ended_run() -> Run:
    return make_run(status=Run.Status.SUCCEEDED, final_output="4")


@pytest.mark.django_db
def test_an_export_refused_twice_is_sent_the_third_time_each_attempt_logged(otlp, settings, caplog):
    settings.OTEL_EXPORT_RETRIES = 5
    otlp.script = [500, 500]  # not 503: the SDK retries that one itself
    run = _ended_run()
    with caplog.at_level(logging.INFO, logger="feedback.tasks"):
        assert run_export_task.apply(args=(run.pk,)).successful()
    assert len(otlp.requests) == 3 and otlp.requests[0].spans == otlp.requests[2].spans
    tries = [r.getMessage() for r in caplog.records if "not exported" in r.getMessage()]
    assert [message.split(":")[0] for message in tries] == [f"run {run.pk} not exported (attempt {n})" for n in (1, 2)]


@pytest.mark.django_db
def test_an_export_with_nothing_to_send_is_not_retried(otlp, settings):
    settings.OTEL_EXPORT_RETRIES = 5
    run = make_run(status=Run.Status.RUNNING)  # not over: nothing to send yet, nothing failed
    assert run_export_task.apply(args=(run.pk,)).successful()
    assert otlp.requests == []


@pytest.mark.django_db
def test_an_export_gives_up_quietly_after_its_retries(otlp, settings):
    settings.OTEL_EXPORT_RETRIES = 1
    otlp.answer = 500
    assert run_export_task.apply(args=(_ended_run().pk,)).successful()
    assert len(otlp.requests) == 2


# --- alert delivery (Celery autoretry, each attempt a row) ---------------------------------------
@pytest.fixture
def delivery_to(monkeypatch, settings, django_capture_on_commit_callbacks):
    """The delivery of a stuck queue's opening to ``url``, queued (and its message dropped: the
    tests run the task themselves)."""
    settings.ALERT_RETRY_BACKOFF_SECONDS = 0
    monkeypatch.setattr(app, "send_task", lambda *args, **kwargs: None)

    def make(url: str) -> AlertDelivery:
        _stuck_rule(webhook_urls=url)
        make_run(created_at=_minutes_ago(20))
        with django_capture_on_commit_callbacks(execute=True):
            alerts_evaluate()
        return AlertDelivery.objects.get()

    return make


@pytest.mark.django_db
def test_an_alert_refused_twice_is_delivered_the_third_time_each_attempt_a_row(delivery_to):
    with WebhookReceiver() as receiver:
        receiver.script = [500, 503]
        delivery = delivery_to(receiver.url)
        assert alert_deliver_task.apply(args=(delivery.pk,)).successful()
        assert len(receiver.received) == 3 and len({r.body for r in receiver.received}) == 1
    delivery.refresh_from_db()
    assert delivery.status == "delivered" and delivery.attempts == 3
    assert _attempts(delivery) == [(1, 500, "retry"), (2, 503, "retry"), (3, 200, "delivered")]


@pytest.mark.django_db
def test_an_alert_refused_for_good_is_not_retried(delivery_to):
    with WebhookReceiver() as receiver:
        receiver.script = [410]
        delivery = delivery_to(receiver.url)
        alert_deliver_task.apply(args=(delivery.pk,))
        assert len(receiver.received) == 1
    delivery.refresh_from_db()
    assert delivery.status == "failed" and _attempts(delivery) == [(1, 410, "failed")]


@pytest.mark.django_db
def test_an_alert_gives_up_after_the_configured_attempts(delivery_to, settings):
    settings.ALERT_DELIVERY_MAX_ATTEMPTS = 3
    with WebhookReceiver() as receiver:
        receiver.script = [503] * 5
        delivery = delivery_to(receiver.url)
        alert_deliver_task.apply(args=(delivery.pk,))
        assert len(receiver.received) == 3
    delivery.refresh_from_db()
    assert delivery.status == "failed"
    assert _attempts(delivery) == [(1, 503, "retry"), (2, 503, "retry"), (3, 503, "failed")]


@pytest.mark.django_db
def test_an_alert_waiting_for_its_retry_is_not_sent_again_by_beat(delivery_to):
    with WebhookReceiver() as receiver:
        receiver.script = [503]
        delivery = delivery_to(receiver.url)
        # The attempt alone, as the worker makes it before Celery holds the retry's message.
        assert alert_deliver(delivery_id=delivery.pk).outcome == "retry"
    assert alert_deliveries_resend() == []  # its retry is in the broker, due within its backoff


# --- a closed day's rebuild beside another (tenacity, once more at once) -------------------------
def _rebuild_refused(monkeypatch, times: int) -> list[int]:
    """The daily table refuses the first ``times`` inserts, as when another rebuild of the same
    days wrote its rows after this one deleted them."""
    calls: list[int] = []
    insert = DailyRunStats.objects.bulk_create

    def bulk_create(rows, **kwargs):
        calls.append(1)
        if len(calls) <= times:
            raise IntegrityError("duplicate key value violates unique constraint")
        return insert(rows, **kwargs)

    monkeypatch.setattr(DailyRunStats.objects, "bulk_create", bulk_create)
    return calls


@pytest.mark.django_db(transaction=True)
def test_a_rebuild_beside_another_counts_once_more(monkeypatch):
    yesterday = timezone.localdate() - timedelta(days=1)
    make_finished_run(created_at=timezone.now() - timedelta(days=1), score=0.5)
    calls = _rebuild_refused(monkeypatch, times=1)
    assert rebuild(since_day=yesterday, until_day=timezone.localdate()) > 0
    assert len(calls) == 2 and DailyRunStats.objects.filter(day=yesterday).count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_rebuild_refused_twice_gives_up(monkeypatch):
    yesterday = timezone.localdate() - timedelta(days=1)
    make_finished_run(created_at=timezone.now() - timedelta(days=1), score=0.5)
    calls = _rebuild_refused(monkeypatch, times=5)
    with pytest.raises(IntegrityError):
        rebuild(since_day=yesterday, until_day=timezone.localdate())
    assert len(calls) == 2
