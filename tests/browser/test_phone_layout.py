"""Every main page fits a 390-pixel phone: nothing wider than the screen, so nothing to scroll
sideways; wide tables scroll inside their own box and the charts take the screen's width."""

import pytest
from django.urls import reverse
from django.utils import timezone
from playwright.sync_api import expect

from feedback.api.tokens import api_token_create
from feedback.evaluation.chain import evaluate_run
from feedback.models import Step, Strategy, StrategyVersion, ToolConfirmation

from ..factories import make_finished_run, make_run
from .conftest import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PHONE = {"width": 390, "height": 844}
LONG = "x" * 300  # one unbroken word, longer than a phone is wide
CHART_WIDTH = "Math.max(...[...document.querySelectorAll('canvas')].map(c => c.getBoundingClientRect().right))"
TABLE_SCROLLS = "(b => b.scrollWidth > b.clientWidth)(document.getElementById('period-table').parentElement)"


def _history(demo_workspace_user) -> tuple:
    """Runs with everything the pages show: scores, steps with long payloads, a plan, a
    confirmation waiting, a strategy with its versions."""
    now = timezone.now()
    for i in range(3):
        run = make_finished_run(
            text=f"Summarise report.txt and count its words {LONG}", kind="file_analysis",
            output=f"It has {i} words. {LONG}", expected_answer="/80 words/", user=demo_workspace_user,
            started_at=now, step_count=2,
            plan=[{"title": f"Read the file {LONG}", "status": "completed"}, {"title": "Write", "status": "pending"}],
        )  # fmt: skip
        Step.objects.create(run=run, index=0, kind="tool_call", tool_name="read_text_file", success=False,
                            arguments={"path": LONG}, error=f"No such file: {LONG}", error_class="ToolError",
                            error_signature="ab" * 20, started_at=now, duration_ms=12)  # fmt: skip
        Step.objects.create(run=run, index=1, kind="final", thought=LONG, started_at=now, duration_ms=1)
        evaluate_run(run.pk)
    waiting = make_run(status="awaiting_confirmation", started_at=now, user=demo_workspace_user)
    ToolConfirmation.objects.create(run=waiting, turn=1, tool_call_id="c1", tool_name="send_reply",
                                    arguments={"to": "ops@example.com", "subject": LONG, "body": LONG})  # fmt: skip
    strategy = Strategy.objects.create(title=f"Look in docs/ {LONG[:150]}", pattern_kind="error_signature", support=7)
    StrategyVersion.objects.create(strategy=strategy, number=1, pattern=LONG, new_guidance=LONG,
                                   condition={"task_kind": "file_analysis"}, guardrails=[])  # fmt: skip
    return run, waiting, strategy


def test_every_main_page_fits_a_390_pixel_phone(page, live_server, demo, screenshot):
    from django.contrib.auth import get_user_model

    staff = get_user_model().objects.get(username="staff")
    run, waiting, strategy = _history(staff)
    api_token_create(user=staff, name=LONG[:100], scope="read")
    page.set_viewport_size(PHONE)
    pages = {
        "reviewer": [
            reverse("feedback-metrics"),
            reverse("feedback-metrics") + "?days=365&granularity=week",
            reverse("feedback-run-list"),
            reverse("feedback-run-detail", args=[run.pk]),
            reverse("feedback-run-detail", args=[waiting.pk]),
            reverse("feedback-review-queue"),
            reverse("feedback-inbox"),
            reverse("feedback-inbox") + f"?item=proposal-{strategy.pk}",
            reverse("feedback-strategy-list"),
            reverse("feedback-strategy-detail", args=[strategy.pk]),
            reverse("feedback-confirmation-list"),
            reverse("feedback-schedule-list"),
            "/no-such-page/",
        ],
        "staff": [reverse("feedback-task-submit"), reverse("feedback-run-list"), reverse("feedback-api-tokens")],
    }
    too_wide = {}
    for user, urls in pages.items():
        page.context.clear_cookies()
        log_in(page, live_server, user, demo[user])
        expect(page.locator("main")).to_be_visible()
        for url in urls:
            page.goto(live_server.url + url)
            if url.startswith(reverse("feedback-metrics")):
                expect(page.locator("html")).to_have_attribute("data-charts-ready", "true")
                # The charts take the screen's width; the tables keep their columns and scroll
                # inside their own box.
                assert page.evaluate(CHART_WIDTH) <= PHONE["width"]
                expect(page.locator("#period-table thead")).to_be_visible()
                assert page.evaluate(TABLE_SCROLLS) is True
                screenshot("phone-metrics")
            width = page.evaluate("document.scrollingElement.scrollWidth")
            if width > PHONE["width"]:
                too_wide[f"{url} ({user})"] = width
    assert not too_wide, f"wider than a {PHONE['width']} px phone: {too_wide}"
