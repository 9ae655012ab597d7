"""A run's page in real Chromium while a real worker runs its task: it updates by itself, and once
the run has ended and its evaluation is in, every poll has stopped (the last answers were 286)."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from feedback.models import Run, Step, ToolConfirmation

from ..factories import make_run
from .conftest import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_run_page_updates_by_itself_and_stops_polling_once_ended(page, live_server, celery_worker_process, demo):
    polls: list[str] = []
    page.on("request", lambda r: polls.append(r.url) if r.resource_type in ("xhr", "fetch") else None)
    answers: list[int] = []
    page.on("response", lambda r: answers.append(r.status) if r.request.resource_type in ("xhr", "fetch") else None)
    log_in(page, live_server, "staff", demo["staff"])
    page.get_by_label("Kind").select_option("file_analysis")
    page.get_by_label("Task").fill("Summarise report.txt and count its words")
    page.get_by_label("Workspace").select_option(label="demo")
    page.get_by_role("button", name="Submit").click()
    expect(page).to_have_url(re.compile(r"/runs/\d+/$"))
    page.evaluate("() => { window.sameDocument = true; }")  # gone if the page were reloaded

    # The worker runs it; the page follows without a reload: steps, status, answer, evaluation.
    expect(page.locator("#run-status")).to_have_text("Answered", timeout=30_000)
    expect(page.locator("ol.trace > li.step")).to_have_count(6)
    expect(page.locator("#final-output")).to_contain_text("It has 80 words")
    expect(page.locator("#evaluation-table")).to_be_visible(timeout=30_000)
    expect(page.locator("#run-score")).not_to_have_text("—")
    assert page.evaluate("() => window.sameDocument") is True
    run = Run.objects.get()
    assert run.evaluations.exists() and run.score is not None
    assert polls, "the page polled while the run went on"
    assert 286 in answers  # the parts of the settled run told htmx to stop

    # Ended and scored: nothing polls any more.
    polls.clear()
    page.wait_for_timeout(6000)  # three times the slowest poll's interval
    assert polls == [], polls
    expect(page.locator("[hx-trigger^='every']")).to_have_count(0)


def test_what_a_reviewer_types_on_a_waiting_run_stays_while_the_page_polls(page, live_server, demo):
    now = timezone.now()
    run = make_run(status=Run.Status.AWAITING_CONFIRMATION, started_at=now - timedelta(minutes=1), step_count=1)
    Step.objects.create(run=run, index=0, kind=Step.Kind.THOUGHT, thought="Reply?", started_at=run.started_at)
    asked = ToolConfirmation.objects.create(
        run=run, turn=1, tool_call_id="c1", tool_name="send_reply", requested_at=now
    )
    polls: list[str] = []
    page.on("request", lambda r: polls.append(r.url) if r.resource_type in ("xhr", "fetch") else None)
    log_in(page, live_server, "reviewer", demo["reviewer"])
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    reason = page.locator(f"#reason-{asked.pk}")
    reason.fill("Not to this customer")
    polls.clear()
    page.wait_for_timeout(3500)
    # Polled and rendered afresh each time (new CSRF masks), swapped in or not: the typing stays.
    assert len(polls) >= 2, polls
    expect(reason).to_have_value("Not to this customer")
