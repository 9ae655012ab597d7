"""An evaluation whose message the broker lost is sent again by the reaper."""

import pytest

from feedback.models import Run

from .factories import make_run

pytestmark = pytest.mark.django_db


def test_an_evaluation_lost_with_the_broker_is_sent_again(db, settings, sent_tasks, django_capture_on_commit_callbacks):
    from datetime import timedelta

    from django.utils import timezone

    from feedback.agent.checkpoint import resend_lost_evaluations
    from feedback.models import Evaluation

    settings.RUN_STALE_AFTER_SECONDS = 60

    def sent() -> list[int]:
        return [args[0] for name, args, _ in sent_tasks if name == "feedback.tasks.run_evaluate_task"]

    long_ago = timezone.now() - timedelta(minutes=5)
    lost = make_run(status=Run.Status.SUCCEEDED, finished_at=long_ago)
    scored = make_run(status=Run.Status.SUCCEEDED, finished_at=long_ago)
    Evaluation.objects.create(run=scored, evaluator="rule", kind="rule", score=1.0)
    make_run(status=Run.Status.SUCCEEDED, finished_at=timezone.now())  # its message may still be queued
    # Every ended run is evaluated, a cancelled one too (feedback/lifecycle.py).
    cancelled = make_run(status=Run.Status.CANCELLED, finished_at=long_ago)
    with django_capture_on_commit_callbacks(execute=True):
        assert sorted(resend_lost_evaluations()) == [lost.pk, cancelled.pk]
    assert sorted(sent()) == [lost.pk, cancelled.pk]
    with django_capture_on_commit_callbacks(execute=True):
        assert resend_lost_evaluations() == []  # once per hold period, not every beat
