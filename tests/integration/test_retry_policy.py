"""The retry policy in a real worker: an alert's webhook refused twice is retried by Celery's
autoretry (through the real broker, after its backoff) and delivered the third time."""

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from feedback.alerts import alerts_evaluate
from feedback.models import AlertDelivery, AlertRule

from ..factories import make_run
from ..webhook_receiver import WebhookReceiver, verify
from .worker import WorkerProcess

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _delivered(timeout: float = 60) -> AlertDelivery:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if done := AlertDelivery.objects.filter(status__in=["delivered", "failed"]).first():
            return done
        time.sleep(0.1)
    raise AssertionError(f"no delivery ended after {timeout} s")


def test_a_real_worker_retries_a_webhook_refused_twice_until_it_accepts(shared_folders):
    # A backoff of 1 s: the retries wait up to 1 s, then 2 s (Celery's full jitter).
    worker = WorkerProcess(shared_folders, "retries", ALERT_RETRY_BACKOFF_SECONDS="1").start()
    try:
        with WebhookReceiver() as receiver:
            receiver.script = [503, 500]
            rule = AlertRule.objects.create(
                name="Queue",
                kind=AlertRule.Kind.STUCK_QUEUE,
                queued_minutes=15,
                heartbeat_minutes=None,
                confirmation_minutes=None,
                webhook_urls=receiver.url,
            )
            make_run(created_at=timezone.now() - timedelta(minutes=20))
            alerts_evaluate()  # queues the opening's notification once it commits: through Redis to the worker
            delivery = _delivered()
            received = receiver.wait_for(3)
    finally:
        worker.stop()
    assert delivery.status == "delivered", worker.log()
    attempts = list(delivery.attempt_rows.values_list("number", "status_code", "outcome"))
    assert attempts == [(1, 503, "retry"), (2, 500, "retry"), (3, 200, "delivered")]
    assert len(received) == 3 and len({r.body for r in received}) == 1  # the same notification each time
    assert all(verify(rule.secret, r) for r in received)
    assert "retry: Retry in" in worker.log()  # Celery's autoretry made the retries
