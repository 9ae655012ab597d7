"""Details of issue 26: the score axis is fixed at 0–1 (a 0.60 score is drawn at 60% of the
chart's height), the compare page fits a desktop and a phone, and the run list's rows keep their
column names on a phone."""

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse
from django.utils import timezone
from playwright.sync_api import expect

from feedback.models import Step

from ..factories import make_finished_run
from .conftest import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 900}
LONG = "y" * 400  # one unbroken word, wider than either screen
OVERFLOW = "document.scrollingElement.scrollWidth - window.innerWidth"
# Where the score's axis draws a value, as a share of the axis's height from its bottom.
SCORE_AT = """(v) => { const s = window.feedbackCharts['chart-score'].scales.y2;
  return [s.min, s.max, (s.bottom - s.getPixelForValue(v)) / (s.bottom - s.top)]; }"""


def _pair(user) -> tuple:
    now = timezone.now()
    runs = []
    for output in (f"The answer is 4. {LONG}", f"Four. {LONG}"):
        run = make_finished_run(
            text=f"What is 2 + 2? {LONG}",
            output=output,
            expected_answer="4",
            user=user,
            started_at=now,
            step_count=2,
            score=0.6,
        )
        Step.objects.create(
            run=run,
            index=0,
            kind="tool_call",
            tool_name="calculator",
            success=True,
            arguments={"expression": LONG},
            result={"value": LONG},
            started_at=now,
            duration_ms=3,
        )
        Step.objects.create(run=run, index=1, kind="final", thought=LONG, started_at=now, duration_ms=1)
        runs.append(run)
    return runs


def test_a_0_60_score_is_drawn_at_60_percent_of_the_chart(page, live_server, demo, screenshot):
    staff = get_user_model().objects.get(username="staff")
    _pair(staff)  # every scored run of the window scores 0.60: a data-following axis would top out there
    log_in(page, live_server, "reviewer", demo["reviewer"])
    page.goto(live_server.url + reverse("feedback-metrics"))
    expect(page.locator("html")).to_have_attribute("data-charts-ready", "true")
    low, high, at = page.evaluate(SCORE_AT, 0.6)
    assert (low, high) == (0, 1)
    assert at == pytest.approx(0.6, abs=0.01)
    screenshot("metrics-score-axis")


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_the_compare_page_fits_the_screen(page, live_server, demo, screenshot, viewport):
    staff = get_user_model().objects.get(username="staff")
    a, b = _pair(staff)
    page.set_viewport_size(viewport)
    log_in(page, live_server, "reviewer", demo["reviewer"])
    page.goto(live_server.url + reverse("feedback-run-compare") + f"?a={a.pk}&b={b.pk}")
    expect(page.locator("#compare-steps")).to_be_visible()
    assert page.evaluate(OVERFLOW) <= 0
    screenshot("run-compare" if viewport is DESKTOP else "run-compare-phone")


def test_run_list_rows_keep_their_column_names_on_a_phone(page, live_server, demo, screenshot):
    staff = get_user_model().objects.get(username="staff")
    a, _ = _pair(staff)
    page.set_viewport_size(PHONE)
    log_in(page, live_server, "reviewer", demo["reviewer"])
    page.goto(live_server.url + reverse("feedback-run-list"))
    row = page.locator(f"#run-{a.pk}")
    expect(row).to_be_visible()
    labels = row.locator("td").evaluate_all("cells => cells.map(c => getComputedStyle(c, '::before').content)")
    # (A reviewer's rows start with the box that selects them for a dataset.)
    assert labels == [
        '"Select: "',
        '"#: "',
        '"Task: "',
        '"Kind: "',
        '"Status: "',
        '"Outcome: "',
        '"Steps: "',
        '"Score: "',
        '"Created: "',
    ]
    assert page.evaluate(OVERFLOW) <= 0
    screenshot("run-list-phone")
    # On a desktop the header names the columns: no label repeated in the cells.
    page.set_viewport_size(DESKTOP)
    assert row.locator("td").first.evaluate("c => getComputedStyle(c, '::before').content") == "none"
