"""A run's page in real Chromium while a real worker runs its task: it updates by itself, and once
the run has ended and its evaluation is in, every poll has stopped (the last answers were 286)."""

import re

import pytest
from playwright.sync_api import expect

from feedback.models import Run

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
