import re

import pytest
from playwright.sync_api import expect

from feedback.evaluation.chain import evaluate_run
from feedback.models import Evaluation, Run

from ..factories import make_finished_run
from .conftest import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_reviewer_scores_a_run_from_the_queue_and_the_intervention_rate_rises(page, live_server, demo, screenshot):
    # A run the evaluators thought poor (a wrong number), and one that needs nobody.
    wrong = make_finished_run(text="What is (17 * 23 + 4) / 5?", output="The answer is 80.", expected_answer="79")
    right = make_finished_run(text="What is 2 + 2?", output="2 + 2 = 4", expected_answer="4")
    evaluate_run(wrong.pk)
    evaluate_run(right.pk)
    wrong.refresh_from_db()
    assert wrong.score < 0.5

    log_in(page, live_server, "reviewer", demo["reviewer"])
    page.get_by_role("link", name="Metrics").click()
    expect(page.get_by_role("heading", name="Metrics", exact=True)).to_be_visible()
    expect(page.locator("#figure-intervention-rate")).to_have_text("0 %")
    expect(page.locator("#figure-interventions")).to_have_text("0 of 2 runs")
    expect(page.locator("html")).to_have_attribute("data-charts-ready", "true")
    expect(page.locator("#chart-intervention")).to_be_visible()

    page.get_by_role("link", name="Review queue").click()
    row = page.locator(f"#review-run-{wrong.pk}")
    expect(row).to_contain_text("Low score")
    expect(page.locator(f"#review-run-{right.pk}")).to_have_count(0)
    screenshot("review-queue")
    row.get_by_role("link", name=re.compile("Score")).click()

    expect(page).to_have_url(re.compile(rf"/runs/{wrong.pk}/#score$"))
    expect(page.locator("#evaluation-table")).to_contain_text("Offline heuristic judge (no LLM)")
    page.get_by_label("Score (0–1)").fill("0.9")
    page.get_by_label("Comment").fill("80 is what the task text implied: <script>alert(1)</script>")
    page.get_by_role("button", name="Record score").click()
    # htmx swaps the evaluation section in place: the human row and the composite appear.
    expect(page.locator("#run-score")).to_have_text("0.90")
    expect(page.locator("#evaluation-table .kind-human")).to_contain_text("<script>alert(1)</script>")
    screenshot("run-scored")

    page.get_by_role("link", name="Metrics").click()
    expect(page.locator("#figure-intervention-rate")).to_have_text("50 %")
    expect(page.locator("#figure-interventions")).to_have_text("1 of 2 runs")
    expect(page.locator("#period-table tbody tr").first.locator(".intervened")).to_have_text("1 / 2")
    screenshot("metrics")

    page.get_by_role("link", name="Review queue").click()
    expect(page.locator(f"#review-run-{wrong.pk}")).to_have_count(0)
    assert Evaluation.objects.get(run=wrong, kind="human").author.username == "reviewer"
    assert Run.objects.get(pk=wrong.pk).score == 0.9
