"""axe-core on every page, for each role: no serious or critical violation. axe runs in the page
(tests/browser/vendor/axe.min.js, test tooling only, never served) over a seeded history, so the
pages show their tables, badges, forms and charts rather than their empty states."""

import json
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse
from django.utils import timezone
from playwright.sync_api import expect

from feedback.evaluation.chain import evaluate_run
from feedback.models import ScoreConfig, Step, Strategy, StrategyVersion, ToolConfirmation

from ..factories import make_finished_run, make_run
from .conftest import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

AXE = (Path(__file__).parent / "vendor" / "axe.min.js").read_text()
# Only what a person with a disability would be blocked or badly hindered by; "moderate" and
# "minor" findings (best practices) are not the bar this test holds.
RUN_AXE = """async () => {
  const result = await axe.run(document, {resultTypes: ["violations"]});
  return result.violations
    .filter((v) => v.impact === "serious" || v.impact === "critical")
    .map((v) => ({id: v.id, impact: v.impact, help: v.help,
                  nodes: v.nodes.slice(0, 3).map((n) => n.target.join(" ") + " — " + n.failureSummary)}));
}"""


def _history(user) -> dict:
    now = timezone.now()
    runs = []
    for i, (text, output, expected) in enumerate(
        [("What is (17 * 23 + 4) / 5?", "The answer is 80.", "79"), ("What is 2 + 2?", "2 + 2 = 4", "4")]
    ):
        run = make_finished_run(
            text=text, output=output, expected_answer=expected, user=user, started_at=now, step_count=2
        )
        Step.objects.create(
            run=run,
            index=0,
            kind="tool_call",
            tool_name="read_text_file",
            success=i == 1,
            arguments={"path": "notes.txt"},
            error="" if i else "No such file: notes.txt",
            error_class="" if i else "ToolError",
            error_signature="" if i else "ab" * 20,
            started_at=now,
            duration_ms=12,
        )
        Step.objects.create(run=run, index=1, kind="final", thought="Done.", started_at=now, duration_ms=1)
        evaluate_run(run.pk)
        runs.append(run)
    waiting = make_run(status="awaiting_confirmation", started_at=now, user=user)
    ToolConfirmation.objects.create(
        run=waiting,
        turn=1,
        tool_call_id="c1",
        tool_name="send_reply",
        arguments={"to": "ops@example.com", "subject": "Hi", "body": "Hello"},
    )
    strategy = Strategy.objects.create(title="Look in docs/ first", pattern_kind="error_signature", support=7)
    StrategyVersion.objects.create(
        strategy=strategy,
        number=1,
        pattern="No such file",
        new_guidance="Look in docs/.",
        condition={"task_kind": "file_analysis"},
        guardrails=[],
    )
    # The score form and the Settings pages with a configuration of each type.
    ScoreConfig.objects.create(name="Stars", data_type="numeric", min_value=1, max_value=5, description="1 to 5")
    ScoreConfig.objects.create(name="Problem", data_type="categorical", categories=["None", "Wrong file"])
    ScoreConfig.objects.create(name="Helpful", data_type="boolean", required=True)
    return {"runs": runs, "waiting": waiting, "strategy": strategy}


def _pages(history: dict) -> list[str]:
    """Every page of feedback/urls.py a person opens (the rest are the parts and actions they load)."""
    a, b = history["runs"]
    return [
        reverse("feedback-task-submit"),
        reverse("feedback-schedule-list"),
        reverse("feedback-run-list"),
        reverse("feedback-run-compare") + f"?a={a.pk}&b={b.pk}",
        reverse("feedback-run-detail", args=[a.pk]),
        reverse("feedback-run-detail", args=[history["waiting"].pk]),
        reverse("feedback-review-queue"),
        reverse("feedback-inbox"),
        reverse("feedback-inbox") + f"?item=confirmation-{history['waiting'].confirmations.get().pk}",
        reverse("feedback-inbox") + f"?item=proposal-{history['strategy'].pk}",
        reverse("feedback-metrics"),
        reverse("feedback-strategy-list"),
        reverse("feedback-strategy-detail", args=[history["strategy"].pk]),
        reverse("feedback-strategies-demo-report"),
        reverse("feedback-confirmation-list"),
        reverse("feedback-alert-list"),
        reverse("feedback-alert-rule-list"),
        reverse("feedback-api-tokens"),
        reverse("feedback-settings-score-list"),
        reverse("feedback-settings-score-create"),
        reverse("feedback-settings-mcp-list"),
        reverse("feedback-settings-price-list"),
        reverse("feedback-settings-tool-list"),
        reverse("feedback-settings-alert-rule-create"),
        "/no-such-page/",
    ]


@pytest.mark.parametrize("role", ["staff", "operator", "reviewer"])
def test_axe_finds_no_serious_or_critical_violation_on_any_page(browser, live_server, demo, role):
    history = _history(get_user_model().objects.get(username="staff"))
    # The app's CSP refuses inline scripts, rightly; axe is injected by the test, not the app.
    context = browser.new_context(viewport={"width": 1280, "height": 900}, locale="en-US", bypass_csp=True)
    page = context.new_page()
    page.set_default_timeout(15_000)
    try:
        page.goto(f"{live_server.url}/accounts/login/")
        found = {"/accounts/login/": _axe(page)}
        log_in(page, live_server, role, demo[role])
        expect(page.locator("main")).to_be_visible()
        for url in _pages(history):
            page.goto(live_server.url + url)
            page.wait_for_load_state("networkidle")
            if page.locator("#metrics-data").count():  # the charts drawn (a role without metrics gets 403)
                expect(page.locator("html")).to_have_attribute("data-charts-ready", "true")
            found[url] = _axe(page)
    finally:
        context.close()
    violations = {url: v for url, v in found.items() if v}
    assert violations == {}, json.dumps(violations, indent=1)
    assert len(found) == len(_pages(history)) + 1  # every page was checked


def _axe(page) -> list[dict]:
    page.add_script_tag(content=AXE)
    return page.evaluate(RUN_AXE)
