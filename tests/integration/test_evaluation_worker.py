import time

import pytest
from django.urls import reverse

from feedback.models import Evaluation, Run

from ..conftest import make_user
from .worker import wait_for_run

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def wait_for_round(run_id: int, number: int, timeout: float = 30) -> list[Evaluation]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = list(Evaluation.objects.filter(run_id=run_id, round=number).exclude(kind="human"))
        if rows:
            return rows
        time.sleep(0.2)
    raise AssertionError(f"Run {run_id} has no evaluation round {number} after {timeout} s")


def test_a_finished_run_is_evaluated_by_the_worker_and_a_reviewer_re_evaluates_it(client, celery_worker_process):
    staff = make_user("eval-staff", "staff")
    reviewer = make_user("eval-reviewer", "reviewer")
    client.force_login(staff)
    client.post(
        reverse("feedback-task-submit"),
        {"kind": "arithmetic", "text": "What is (17 * 23 + 4) / 5?", "expected_answer": "79"},
    )
    run = wait_for_run(Run.objects.get().pk)
    assert run.status == Run.Status.SUCCEEDED, celery_worker_process.log()

    first = {e.kind: e for e in wait_for_round(run.pk, 1)}
    assert set(first) == {"reference", "rule", "judge"}, celery_worker_process.log()
    assert first["reference"].score == 1.0
    run.refresh_from_db()
    assert run.score is not None and run.score >= 0.7

    client.force_login(reviewer)
    assert client.post(reverse("feedback-run-reevaluate", args=[run.pk])).status_code == 302
    second = wait_for_round(run.pk, 2)
    assert len(second) == 3
    assert Evaluation.objects.filter(run=run).count() == 6  # round 1 kept as history
