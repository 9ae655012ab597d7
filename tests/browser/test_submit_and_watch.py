import re

import pytest
from playwright.sync_api import expect

from feedback.models import Run

from .conftest import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_staff_submit_a_task_and_watch_it_succeed(page, live_server, celery_worker_process, demo, screenshot):
    log_in(page, live_server, "staff", demo["staff"])
    expect(page.get_by_role("heading", name="Submit a task")).to_be_visible()
    screenshot("task-submit")

    page.get_by_label("Kind").select_option("file_analysis")
    page.get_by_label("Task").fill("Summarise report.txt and count its words")
    page.get_by_label("Workspace").select_option(label="demo")
    page.get_by_role("button", name="Submit").click()

    expect(page).to_have_url(re.compile(r"/runs/\d+/$"))
    expect(page.locator(".message.success")).to_contain_text("is queued")
    # The page refreshes itself (htmx polling) until the worker has finished the run.
    expect(page.locator("#run-status")).to_have_text("Answered", timeout=30_000)
    expect(page.locator("#final-output")).to_contain_text("It has 80 words")
    expect(page.locator("ol.trace > li")).to_have_count(6)
    # Every model call is a step of its own: two model calls, three tool calls, the answer.
    kinds = Run.objects.get().steps.order_by("index").values_list("kind", flat=True)
    assert " ".join(kinds) == "thought tool_call tool_call thought tool_call final"
    expect(page.locator("ol.plan > li")).to_have_count(3)
    expect(page.get_by_role("button", name="Re-run")).to_be_visible()
    expect(page.get_by_role("button", name="Cancel")).to_have_count(0)
    screenshot("run-detail")

    run = Run.objects.get()
    assert run.status == Run.Status.SUCCEEDED
    page.get_by_role("link", name="Runs").click()
    expect(page.locator(f"#run-{run.pk}")).to_contain_text("Answered")
    screenshot("run-list")


def test_an_operator_cannot_submit_and_sees_no_submit_link(page, live_server, demo):
    log_in(page, live_server, "operator", demo["operator"])
    expect(page.get_by_role("heading", name="Runs")).to_be_visible()
    expect(page.get_by_role("link", name="Submit task")).to_have_count(0)
    expect(page.get_by_role("link", name="Strategies")).to_be_visible()
    response = page.goto(f"{live_server.url}/tasks/new/")
    assert response.status == 403


def test_a_wrong_password_is_refused(page, live_server, demo):
    log_in(page, live_server, "staff", "not-the-password")
    expect(page.get_by_role("alert")).to_contain_text("didn't match")
    expect(page).to_have_url(re.compile(r"/accounts/login/"))
