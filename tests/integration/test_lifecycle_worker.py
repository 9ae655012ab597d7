"""A run's end with a real worker, broker and PostgreSQL: a run waiting for confirmations is
cancelled from its page; the worker evaluates it as a run without an answer (no judge), its
calls are withdrawn, and approving one on the confirmations page says why it cannot be: the run
never runs again. A queued run whose cancel the worker finds ends the same way."""

import re
import time

import pytest
from django.urls import reverse

from feedback.models import Evaluation, Run, ToolConfirmation

from ..conftest import make_user
from .test_evaluation_worker import wait_for_round

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def wait_for_status(run_id: int, status: str, timeout: float = 60) -> Run:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = Run.objects.get(pk=run_id)
        if run.status == status:
            return run
        time.sleep(0.2)
    raise AssertionError(f"Run {run_id} is {Run.objects.get(pk=run_id).status}, not {status}, after {timeout} s")


def test_a_waiting_run_cancelled_from_its_page_is_evaluated_and_its_calls_withdrawn(
    client, demo_workspace, celery_worker_process
):
    staff = make_user("life-staff", "staff")
    reviewer = make_user("life-reviewer", "reviewer")
    client.force_login(staff)
    client.post(
        reverse("feedback-task-submit"),
        {
            "kind": "email_triage",
            "text": "Triage the emails in inbox/ and reply to the urgent ones",
            "workspace": demo_workspace.pk,
        },
    )
    run = wait_for_status(Run.objects.get().pk, Run.Status.AWAITING_CONFIRMATION)
    assert run.confirmations.filter(status=ToolConfirmation.Status.PENDING).count() == 3

    assert client.post(reverse("feedback-run-cancel", args=[run.pk])).status_code == 302
    rows = wait_for_round(run.pk, 1)
    run.refresh_from_db()
    assert (run.status, run.outcome) == (Run.Status.CANCELLED, Run.Outcome.NOT_ACCOMPLISHED)
    # No answer: not sent to the judge (and without an expected answer, no reference either).
    assert {r.kind for r in rows} == {Evaluation.Kind.RULE}, celery_worker_process.log()
    assert set(run.confirmations.values_list("status", "decided_by__username")) == {("withdrawn", "life-staff")}

    client.force_login(reviewer)
    confirmation = run.confirmations.order_by("pk").first()
    page = client.post(
        reverse("feedback-confirmation-decide", args=[confirmation.pk]), {"decision": "approve"}, follow=True
    )
    said = re.findall(r'<li class="message [^"]*">(.*?)</li>', page.content.decode())
    assert said[-1] == f"This call was withdrawn when run #{run.pk} ended (Cancelled): nothing was decided."
    assert not [message for message in said if "resumes" in message]
    confirmation.refresh_from_db()
    assert confirmation.status == ToolConfirmation.Status.WITHDRAWN
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLED
    assert not run.steps.filter(tool_name="send_reply").exists()


def test_a_queued_run_whose_cancel_the_worker_finds_ends_evaluated(celery_worker_process):
    from feedback import queue

    from ..factories import make_run

    run = make_run(cancel_requested=True)  # cancelled while its message waited in the broker
    queue.run_execute(run.pk)  # outside a transaction: sent at once
    rows = wait_for_round(run.pk, 1)
    run.refresh_from_db()
    assert (run.status, run.error, run.outcome) == (
        Run.Status.CANCELLED,
        "Cancelled by a user.",
        Run.Outcome.NOT_ACCOMPLISHED,
    )
    assert rows and Evaluation.Kind.JUDGE not in {r.kind for r in rows}
