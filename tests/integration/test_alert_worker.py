"""An alert's notifications delivered by a real worker process from the real broker."""

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from feedback.alerts import alerts_evaluate
from feedback.models import AlertDelivery, AlertRule, Run, ToolConfirmation

from ..factories import make_run
from ..webhook_receiver import WebhookReceiver, verify
from .worker import WorkerProcess

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _wait_until_delivered(count: int, timeout: float = 30) -> list[AlertDelivery]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = list(AlertDelivery.objects.filter(status="delivered").order_by("id"))
        if len(done) >= count:
            return done
        time.sleep(0.1)
    raise AssertionError(f"{count} deliveries not delivered after {timeout} s")


def test_a_real_worker_posts_the_opening_after_a_500_and_the_resolution(shared_folders):
    worker = WorkerProcess(shared_folders, "alerts", ALERT_RETRY_BACKOFF_SECONDS="0.2").start()
    try:
        with WebhookReceiver() as receiver:
            receiver.script = [500]
            rule = AlertRule.objects.create(name="Waiting for people", kind=AlertRule.Kind.STUCK_QUEUE,
                                            queued_minutes=None, heartbeat_minutes=None, confirmation_minutes=60,
                                            webhook_urls=receiver.url)  # fmt: skip
            run = make_run(status=Run.Status.AWAITING_CONFIRMATION)
            confirmation = ToolConfirmation.objects.create(
                run=run, turn=1, tool_call_id="c1", tool_name="send_reply",
                requested_at=timezone.now() - timedelta(minutes=90),
            )  # fmt: skip
            alerts_evaluate()  # queues the opening's notification once it commits: through Redis to the worker
            alerts_evaluate()
            (opened,) = _wait_until_delivered(1)
            ToolConfirmation.objects.filter(pk=confirmation.pk).update(status="rejected", decided_at=timezone.now())
            Run.objects.filter(pk=run.pk).update(status=Run.Status.CANCELLED)
            alerts_evaluate()
            alerts_evaluate()
            _, resolved = _wait_until_delivered(2)
            received = receiver.wait_for(3)
    finally:
        worker.stop()
    refused, *posted = received
    assert [r.json["state"] for r in posted] == ["open", "resolved"], worker.log()
    assert refused.body == posted[0].body  # the 500 was retried by the worker, after its backoff
    assert all(verify(rule.secret, r) for r in received)
    assert list(opened.attempt_rows.values_list("status_code", "outcome")) == [(500, "retry"), (200, "delivered")]
    assert list(resolved.attempt_rows.values_list("status_code", "outcome")) == [(200, "delivered")]
