"""The API answers JSON whatever fails: an exception nothing expected is a logged JSON 500, never
Django's HTML page; and a task whose run was saved is answered 201 with its run even when sending
it to the broker fails, the reaper sending it later (a client told "error" would submit it again)."""

import logging

import pytest
from django.test import Client

from agentsite.celery import app
from feedback import queue
from feedback.agent.checkpoint import reap_stale_runs
from feedback.api import tasks as task_endpoints
from feedback.models import Run

from .api_helpers import token_for

TASK = {"kind": "arithmetic", "text": "What is 6 * 7?", "expected_answer": "42"}


@pytest.fixture
def api_client():
    # As a client sees it: an exception becomes whatever the server answers, not a test error.
    return Client(raise_request_exception=False)


def test_an_unexpected_exception_in_an_api_view_is_a_logged_json_500(api_client, operator, monkeypatch, caplog):
    def broken(window):
        raise RuntimeError("the metrics query broke")

    monkeypatch.setattr(task_endpoints.metrics, "period_counts", broken)
    with caplog.at_level(logging.ERROR, logger="django.request"):
        response = api_client.get("/api/v1/metrics", headers={"Authorization": f"Bearer {token_for(operator)}"})

    assert response.status_code == 500
    assert response["Content-Type"] == "application/json; charset=utf-8"
    assert response.json() == {"detail": "The server failed to answer this request: the error is logged."}
    assert "the metrics query broke" not in response.content.decode()
    (record,) = [r for r in caplog.records if r.name == "django.request" and r.levelno == logging.ERROR]
    assert record.getMessage() == "Internal Server Error: /api/v1/metrics"
    assert isinstance(record.exc_info[1], RuntimeError)


def test_a_task_whose_broker_send_fails_is_201_with_its_run_and_the_reaper_sends_it(
    api_client, staff, settings, monkeypatch, caplog, django_capture_on_commit_callbacks
):
    def unsendable(name, args=(), kwargs=None, **options):
        # What a fresh install without `packaging` raised from kombu's Redis transport.
        raise ModuleNotFoundError("No module named 'packaging'")

    monkeypatch.setattr(app, "send_task", unsendable)
    headers = {"Authorization": f"Bearer {token_for(staff)}"}
    with caplog.at_level(logging.ERROR, logger="feedback.queue"), django_capture_on_commit_callbacks(execute=True):
        response = api_client.post("/api/v1/tasks", data=TASK, content_type="application/json", headers=headers)

    assert response.status_code == 201, response.content
    run = Run.objects.get()
    assert response.json()["id"] == run.pk and response.json()["status"] == run.status == Run.Status.QUEUED
    (record,) = [r for r in caplog.records if r.name == "feedback.queue"]
    assert record.getMessage() == f"sending {queue.RUN_EXECUTE}({run.pk},) failed; it will be sent again by the reaper"
    assert isinstance(record.exc_info[1], ModuleNotFoundError)

    # Once sending works, the reaper's next pass sends the run that was never sent.
    sent = []
    monkeypatch.setattr(app, "send_task", lambda name, args=(), kwargs=None, **options: sent.append((name, args)))
    settings.RUN_STALE_AFTER_SECONDS = 0
    with django_capture_on_commit_callbacks(execute=True):
        assert reap_stale_runs() == [run.pk]
    assert sent == [(queue.RUN_EXECUTE, (run.pk,))]
