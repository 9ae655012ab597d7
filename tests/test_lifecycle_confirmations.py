"""A cancelled run's confirmations (issue 23.7): a cancel withdraws the calls still waiting
(when, why, by whom); deciding a withdrawn one, or one whose run is not waiting for it, is
refused with a message that says why, on the page and in the API (409), and nothing says the
run resumes unless it does; the confirmations page and the API's inbox list no withdrawn call."""

import importlib
import re

import pytest
from django.apps import apps
from django.urls import reverse
from django.utils import timezone

from feedback import services
from feedback.agent.loop import execute_run
from feedback.models import Run, Task, ToolConfirmation

from .api_helpers import call, token_for
from .factories import make_run

pytestmark = pytest.mark.django_db

TRIAGE_WITH_REPLIES = "Triage the emails in inbox/ and reply to the urgent ones"
EXECUTE = "feedback.tasks.run_execute_task"


def waiting_run(staff) -> Run:
    """A real run of the offline model that waits for three replies to be confirmed."""
    from feedback.demo import seed_workspace

    run = make_run(text=TRIAGE_WITH_REPLIES, kind=Task.Kind.EMAIL_TRIAGE, workspace=seed_workspace(), user=staff)
    execute_run(run.pk)
    run.refresh_from_db()
    assert run.status == Run.Status.AWAITING_CONFIRMATION and run.confirmations.count() == 3
    return run


def messages_of(response) -> list[str]:
    return re.findall(r'<li class="message [^"]*">(.*?)</li>', response.content.decode())


def test_a_cancel_withdraws_the_calls_still_waiting_and_keeps_the_decided_ones(staff, reviewer):
    run = waiting_run(staff)
    first, *others = run.confirmations.order_by("pk")
    services.confirmation_decide(confirmation=first, user=reviewer, approve=True)
    before = timezone.now()

    assert services.run_cancel(run=run, user=staff)

    first.refresh_from_db()
    assert first.status == ToolConfirmation.Status.APPROVED and first.decided_by == reviewer  # decided: kept
    for confirmation in others:
        confirmation.refresh_from_db()
        assert confirmation.status == ToolConfirmation.Status.WITHDRAWN
        assert confirmation.decided_at >= before and confirmation.decided_by == staff
        assert confirmation.reason == "The run was cancelled."
    assert not ToolConfirmation.objects.filter(status=ToolConfirmation.Status.PENDING).exists()


def test_approving_a_withdrawn_call_on_the_page_is_refused_and_never_says_the_run_resumes(
    client, staff, reviewer, sent_tasks, django_capture_on_commit_callbacks
):
    run = waiting_run(staff)
    confirmation = run.confirmations.order_by("pk").first()
    services.run_cancel(run=run, user=staff)
    client.force_login(reviewer)

    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            reverse("feedback-confirmation-decide", args=[confirmation.pk]), {"decision": "approve"}, follow=True
        )

    assert messages_of(response) == [
        f"This call was withdrawn when run #{run.pk} ended (Cancelled): nothing was decided."
    ]
    assert "resumes" not in response.content.decode()
    confirmation.refresh_from_db()
    assert (confirmation.status, confirmation.decided_by) == (ToolConfirmation.Status.WITHDRAWN, staff)
    assert Run.objects.get(pk=run.pk).status == Run.Status.CANCELLED
    assert not [name for name, _, _ in sent_tasks if name == EXECUTE]  # nothing queued the run again


def test_deciding_a_withdrawn_call_through_the_api_is_a_409_that_says_why(client, staff, reviewer, sent_tasks):
    run = waiting_run(staff)
    confirmation = run.confirmations.order_by("pk").first()
    services.run_cancel(run=run, user=staff)

    token = token_for(reviewer)
    for decision in ({"decision": "approve"}, {"decision": "reject", "reason": "Wrong customer"}):
        response = call(client, "POST", f"/confirmations/{confirmation.pk}/decide", token=token, body=decision)
        assert response.status_code == 409
        assert response.json() == {
            "detail": f"This call was withdrawn when run #{run.pk} ended (Cancelled): nothing was decided."
        }
    confirmation.refresh_from_db()
    assert confirmation.status == ToolConfirmation.Status.WITHDRAWN and confirmation.reason == "The run was cancelled."


def test_a_pending_call_of_a_run_that_is_not_waiting_for_it_is_refused(client, staff, reviewer, sent_tasks):
    # As a run left it before cancels withdrew confirmations (or in the moment before its worker
    # pauses it): pending, its run not waiting.
    run = make_run(status=Run.Status.FAILED, user=staff)
    stale = ToolConfirmation.objects.create(run=run, turn=1, tool_call_id="c1", tool_name="send_reply", arguments={})
    refusal = f"Run #{run.pk} is not waiting for this call (it is Failed): nothing was decided."

    with pytest.raises(services.StaleConfirmation, match=re.escape(refusal)):
        services.confirmation_decide(confirmation=stale, user=reviewer, approve=True)
    response = call(
        client, "POST", f"/confirmations/{stale.pk}/decide", token=token_for(reviewer), body={"decision": "approve"}
    )
    assert (response.status_code, response.json()) == (409, {"detail": refusal})
    client.force_login(reviewer)
    page = client.post(reverse("feedback-confirmation-decide", args=[stale.pk]), {"decision": "approve"}, follow=True)
    assert messages_of(page) == [refusal]
    stale.refresh_from_db()
    assert stale.status == ToolConfirmation.Status.PENDING and stale.decided_at is None
    assert Run.objects.get(pk=run.pk).status == Run.Status.FAILED


def test_the_confirmations_page_and_the_api_list_no_withdrawn_call_as_waiting(client, staff, reviewer):
    cancelled = waiting_run(staff)
    waiting = waiting_run(staff)
    services.run_cancel(run=cancelled, user=staff)
    client.force_login(reviewer)

    html = client.get(reverse("feedback-confirmation-list")).content.decode()
    pending_part, _, decided_part = html.partition("Recently decided")
    waiting_ids = {c.pk for c in waiting.confirmations.all()}
    withdrawn_ids = {c.pk for c in cancelled.confirmations.all()}
    assert {int(i) for i in re.findall(r'id="confirmation-(\d+)"', pending_part)} == waiting_ids
    assert f"run #{cancelled.pk}" not in pending_part
    assert decided_part.count("<td>Withdrawn</td>") == 3
    assert decided_part.count("<td>The run was cancelled.</td>") == 3

    listed = call(client, "GET", "/confirmations", token=token_for(reviewer))
    assert listed.status_code == 200
    assert {c["id"] for c in listed.json()["data"]} == waiting_ids
    assert not withdrawn_ids & {c["id"] for c in listed.json()["data"]}
    assert {c["run_status"] for c in listed.json()["data"]} == {"awaiting_confirmation"}


def test_a_decision_says_the_run_resumes_only_when_nothing_else_waits(
    client, staff, reviewer, sent_tasks, django_capture_on_commit_callbacks
):
    run = waiting_run(staff)
    first, second, third = run.confirmations.order_by("pk")
    client.force_login(reviewer)
    url = lambda c: reverse("feedback-confirmation-decide", args=[c.pk])  # noqa: E731

    with django_capture_on_commit_callbacks(execute=True):
        approved = client.post(url(first), {"decision": "approve"}, follow=True)
        refused = client.post(url(second), {"decision": "reject", "reason": "Not this one"}, follow=True)
    assert messages_of(approved) == [f"Approved: run #{run.pk} still waits for 2 other calls."]
    assert messages_of(refused) == [f"Refused: run #{run.pk} still waits for 1 other call."]
    assert Run.objects.get(pk=run.pk).status == Run.Status.AWAITING_CONFIRMATION
    assert not [name for name, _, _ in sent_tasks if name == EXECUTE]

    with django_capture_on_commit_callbacks(execute=True):
        response = call(
            client, "POST", f"/confirmations/{third.pk}/decide", token=token_for(reviewer), body={"decision": "approve"}
        )
    assert response.status_code == 200
    body = response.json()
    assert (body["run_resumed"], body["waiting"]) == (True, 0)
    assert (body["confirmation"]["status"], body["confirmation"]["decided_by"]) == ("approved", "reviewer")
    assert Run.objects.get(pk=run.pk).status == Run.Status.QUEUED
    assert [args for name, args, _ in sent_tasks if name == EXECUTE] == [(run.pk,)]


def test_a_refusal_through_the_api_needs_a_reason_and_only_reviewers_decide(client, staff, operator, reviewer):
    run = waiting_run(staff)
    confirmation = run.confirmations.order_by("pk").first()
    path = f"/confirmations/{confirmation.pk}/decide"

    token = token_for(reviewer)
    no_reason = call(client, "POST", path, token=token, body={"decision": "reject"})
    assert no_reason.status_code == 400 and no_reason.json()["errors"] == {"reason": ["Say why you refuse this call."]}
    by_operator = call(client, "POST", path, token=token_for(operator), body={"decision": "approve"})
    assert by_operator.status_code == 403
    missing = call(client, "POST", "/confirmations/999999/decide", token=token, body={"decision": "approve"})
    assert missing.status_code == 404
    confirmation.refresh_from_db()
    assert confirmation.status == ToolConfirmation.Status.PENDING


def test_the_migration_withdraws_the_calls_runs_left_pending_when_they_ended(staff):
    ended_at = timezone.now()
    cancelled = make_run(status=Run.Status.CANCELLED, finished_at=ended_at)
    waiting = make_run(status=Run.Status.AWAITING_CONFIRMATION)
    left = ToolConfirmation.objects.create(run=cancelled, turn=1, tool_call_id="c1", tool_name="send_reply")
    live = ToolConfirmation.objects.create(run=waiting, turn=1, tool_call_id="c1", tool_name="send_reply")

    migration = importlib.import_module("feedback.migrations.0033_confirmation_withdrawn")
    migration.withdraw_stale(apps, None)

    left.refresh_from_db()
    live.refresh_from_db()
    assert (left.status, left.decided_at, left.reason) == ("withdrawn", ended_at, "The run was cancelled.")
    assert live.status == ToolConfirmation.Status.PENDING
