import re

import pytest
from playwright.sync_api import expect

from feedback.agent.loop import execute_run
from feedback.models import PlaygroundRun, Run

from ..factories import make_run
from .conftest import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_reviewer_edits_guidance_in_the_playground_and_compares_the_re_run(
    page, live_server, celery_worker_process, demo, screenshot
):
    from django.contrib.auth.models import User

    original = make_run(user=User.objects.get(username="staff"), text="What is (12 + 7) * 3?")
    execute_run(original.pk)  # the demo model, as the worker would run it
    original.refresh_from_db()
    assert original.status == Run.Status.SUCCEEDED and original.system_prompt

    log_in(page, live_server, "reviewer", demo["reviewer"])
    page.goto(f"{live_server.url}/runs/{original.pk}/")
    expect(page.get_by_role("link", name="Open in playground")).to_be_visible()
    # Every model call of the trace opens the playground too (the run's two model calls, not its tool calls).
    step_links = page.locator("[data-playground-step]")
    expect(step_links).to_have_count(original.steps.exclude(kind__in=["tool_call", "reflection"]).count())
    step_links.first.click()
    expect(page.get_by_role("heading", name=f"Playground: run #{original.pk}")).to_be_visible()
    expect(page.locator("#no-reruns")).to_be_visible()
    expect(page.get_by_label("System prompt")).to_have_value(re.compile(re.escape(original.system_prompt[:40])))

    # An empty edit is refused on the page, with what was typed kept.
    page.get_by_label("System prompt").fill(original.system_prompt)
    page.get_by_label("Note (what you are trying)").fill("no edit at all")
    page.get_by_role("button", name="Re-run with this edit").click()
    expect(page.locator("#playground-form")).to_contain_text("without an edit it is a plain re-run")
    expect(page.get_by_label("Note (what you are trying)")).to_have_value("no edit at all")
    assert not PlaygroundRun.objects.exists()

    page.get_by_role("textbox", name="Guidance").fill("Show the <b>calculator</b>'s result as the answer.")
    page.get_by_label("Note (what you are trying)").fill("does it still answer 57?")
    page.get_by_role("button", name="Re-run with this edit").click()
    rerun = PlaygroundRun.objects.get()
    row = page.locator(f"#rerun-{rerun.run_id}")
    expect(row).to_contain_text("Show the <b>calculator</b>'s result")  # shown as typed, not as markup
    expect(row.locator("b")).to_have_count(0)
    # The list polls itself until the worker has finished the re-run, then stops.
    expect(row.locator(".badge")).to_have_text("Answered", timeout=30_000)
    screenshot("playground", full_page=False)

    row.get_by_role("link", name="Compare").click()
    expect(page).to_have_url(re.compile(rf"/compare/\?a={original.pk}&b={rerun.run_id}"))
    answers = page.locator("#compare-answer td")
    expect(answers.nth(0)).to_contain_text("57")
    expect(answers.nth(1)).to_contain_text("57")
    run = Run.objects.get(pk=rerun.run_id)
    assert run.purpose == Run.Purpose.PLAYGROUND
    assert "Show the <b>calculator</b>'s result as the answer." in run.system_prompt
