"""In real Chromium, as the demo operator: the Settings section, an alert rule refused then saved
with what was typed kept, switched off, and an MCP server's connection tested with htmx against
the real test server (tests/mcp_server.py); a score configuration defined, then asked for on a
run's page and counted on the metrics page."""

import sys
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from feedback.models import AlertRule, McpServer, ScoreValue

from ..conftest import MCP_SERVER
from ..factories import make_finished_run
from .conftest import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_an_operator_keeps_alert_rules_and_tests_an_mcp_server(page, live_server, demo, screenshot):
    McpServer.objects.create(name="team", command=sys.executable, args=[str(MCP_SERVER), "stdio"], timeout_seconds=30)
    log_in(page, live_server, "operator", demo["operator"])

    page.get_by_role("navigation", name="Main").get_by_role("link", name="Settings").click()
    page.get_by_role("navigation", name="Settings").get_by_role("link", name="Alert rules").click()
    page.get_by_role("link", name="Add a rule").click()
    page.get_by_label("Name", exact=True).fill("Scores fall <fast>")
    page.get_by_label("Kind", exact=True).select_option("score_drop")
    page.get_by_label("Threshold", exact=True).fill("1.5")
    page.get_by_label("Webhook URLs", exact=True).fill("https://hooks.example.org/alerts")
    page.get_by_role("button", name="Save").click()

    expect(page.get_by_text("Scores and rates are between 0 and 1.")).to_be_visible()
    expect(page.get_by_label("Name", exact=True)).to_have_value("Scores fall <fast>")
    expect(page.get_by_label("Webhook URLs", exact=True)).to_have_value("https://hooks.example.org/alerts")
    assert not AlertRule.objects.exists()
    page.get_by_label("Threshold", exact=True).fill("0.5")
    page.get_by_role("button", name="Save").click()

    row = page.locator(f"#alert-rule-{AlertRule.objects.get().pk}")
    expect(row).to_contain_text("Scores fall <fast>")
    expect(row).to_contain_text("by operator")
    row.get_by_role("button", name="Disable").click()
    expect(page.get_by_text("“Scores fall <fast>” is off: beat no longer checks it.")).to_be_visible()
    assert not AlertRule.objects.get().enabled
    screenshot("settings-alert-rules")

    page.get_by_role("navigation", name="Settings").get_by_role("link", name="MCP servers").click()
    page.get_by_role("button", name="Test connection").click()
    result = page.locator(".mcp-test").first
    expect(result).to_contain_text("team answered with 11 tools.", timeout=60_000)
    expect(result.locator("code", has_text="team__add")).to_be_visible()
    expect(page.get_by_role("heading", name="MCP servers")).to_be_visible()  # the page stayed, htmx swapped
    screenshot("settings-mcp-servers")


def test_an_operator_defines_scores_and_a_reviewer_rates_a_run_with_them(page, live_server, demo, screenshot):
    run = make_finished_run(output="The file has 3 lines.", finished_at=timezone.now() - timedelta(hours=1))
    log_in(page, live_server, "operator", demo["operator"])
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Settings").click()
    page.get_by_role("navigation", name="Settings").get_by_role("link", name="Scores").click()
    page.get_by_role("link", name="Add a score").click()
    page.get_by_label("Name", exact=True).fill("Main problem")
    page.get_by_label("Type", exact=True).select_option("categorical")
    page.get_by_label("Categories", exact=True).fill("only one")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_text("Give at least two categories.")).to_be_visible()
    page.get_by_label("Categories", exact=True).fill("None\nWrong file\nIncomplete")
    page.get_by_role("button", name="Save").click()
    expect(page.locator("table.score-configs")).to_contain_text("None / Wrong file / Incomplete")
    page.get_by_role("link", name="Add a score").click()
    page.get_by_label("Name", exact=True).fill("Correctness")
    page.get_by_label("Minimum", exact=True).fill("1")
    page.get_by_label("Maximum", exact=True).fill("5")
    page.get_by_role("button", name="Save").click()
    expect(page.locator("table.score-configs")).to_contain_text("1 – 5")
    screenshot("settings-scores")

    page.context.clear_cookies()
    log_in(page, live_server, "reviewer", demo["reviewer"])
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    form = page.locator("#score")
    form.get_by_label("Score (0–1)").fill("0.2")
    form.get_by_label("Correctness").fill("2")
    form.get_by_label("Main problem").select_option("Wrong file")
    form.get_by_role("button", name="Record score").click()
    table = page.locator("#evaluation-table")
    expect(table).to_contain_text("Wrong file")  # swapped in by htmx, the page kept
    expect(table.locator(".score-values")).to_contain_text("Correctness 2")
    values = {v.config.name: v.display for v in ScoreValue.objects.select_related("config")}
    assert values == {"Correctness": "2", "Main problem": "Wrong file"}
    page.goto(f"{live_server.url}/metrics/")
    expect(page.locator("#reviewer-scores")).to_contain_text("Wrong file 1 (100%)")
