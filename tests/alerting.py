"""What the alert tests share: the settings they run under, an in-process worker for the tasks
alerts queue, beat's evaluation, and rules and runs made the way the product makes them. The fixtures are
named apart from their functions so that a test module imports them without shadowing."""

from datetime import timedelta

import pytest
from django.utils import timezone

import feedback.tasks  # noqa: F401  (registers the tasks the worker fixture runs)
from agentsite.celery import app
from feedback.alerts import alerts_evaluate
from feedback.models import (
    AlertDelivery,
    AlertRule,
    Run,
    Task,
)

from .factories import make_finished_run

pytestmark = pytest.mark.django_db

SCORE_DROP, ERROR_RATE = AlertRule.Kind.SCORE_DROP, AlertRule.Kind.ERROR_RATE
HARMFUL_TRIAL, STUCK_QUEUE = AlertRule.Kind.HARMFUL_TRIAL, AlertRule.Kind.STUCK_QUEUE


@pytest.fixture(autouse=True, name="_alert_settings")
def alert_settings_fixture(settings):
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


@pytest.fixture(name="worker")
def worker_fixture(monkeypatch):
    inline = InlineWorker()
    monkeypatch.setattr(app, "send_task", inline.send_task)
    return inline


@pytest.fixture(name="evaluate")
def evaluate_fixture(django_capture_on_commit_callbacks, worker):
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
