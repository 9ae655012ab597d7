"""The trace as a tree and a timeline in real Chromium: a sub-agent run folded and unfolded in its
parent's step (by mouse and keyboard), model calls and tool calls on one time axis, payloads folded
with their size, "only what went wrong" and search within the trace, kept in the URL."""

import os
import re
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from feedback.models import Run, Step

from ..factories import make_run
from .conftest import SCREENSHOTS, log_in
from .test_accessibility import AXE, RUN_AXE

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

BAR = """(selector) => {
  const bar = document.querySelector(selector), track = bar.parentElement.getBoundingClientRect();
  const box = bar.getBoundingClientRect();
  const colour = getComputedStyle(bar).backgroundColor;
  return {left: box.left - track.left, width: box.width, track: track.width, colour: colour};
}"""


def _tree() -> tuple[Run, Run]:
    """A parent run whose step 1 delegated to a child: a model call, the delegation, a failed
    call, a guardrail's refusal and the answer; the child a model call and a calculation."""
    start = timezone.now() - timedelta(minutes=2)
    parent = make_run(status=Run.Status.SUCCEEDED, text="Ask a helper, then fetch the weather", started_at=start,
                      finished_at=start + timedelta(seconds=10), final_output="42, and no weather")  # fmt: skip
    Step.objects.create(run=parent, index=0, kind=Step.Kind.THOUGHT, thought="I will ask a helper for 6 * 7.",
                        started_at=start, duration_ms=2000, tokens_in=120, tokens_out=30)  # fmt: skip
    delegate = Step.objects.create(run=parent, index=1, kind=Step.Kind.TOOL_CALL, tool_name="delegate",
                                   arguments={"task": "What is 6 * 7?"}, result={"answer": "42"}, success=True,
                                   started_at=start + timedelta(seconds=2), duration_ms=3000)  # fmt: skip
    Step.objects.create(run=parent, index=2, kind=Step.Kind.TOOL_CALL, tool_name="http_get",
                        arguments={"url": "https://weather.example"}, success=False,
                        error="Name or service not known", error_class="ToolError",
                        started_at=start + timedelta(seconds=5), duration_ms=400)  # fmt: skip
    Step.objects.create(run=parent, index=3, kind=Step.Kind.TOOL_CALL, tool_name="delete_file",
                        arguments={"path": "notes.txt"}, success=False, error="Refused by strategy #3",
                        error_class="GuardrailRefused", started_at=start + timedelta(seconds=6),
                        duration_ms=1)  # fmt: skip
    Step.objects.create(run=parent, index=4, kind=Step.Kind.FINAL, thought="42, and no weather",
                        started_at=start + timedelta(seconds=7), duration_ms=900)  # fmt: skip
    child = make_run(status=Run.Status.SUCCEEDED, text="What is 6 * 7?", parent=parent, parent_step=delegate,
                     started_at=start + timedelta(seconds=2), finished_at=start + timedelta(seconds=5),
                     final_output="42")  # fmt: skip
    Step.objects.create(run=child, index=0, kind=Step.Kind.TOOL_CALL, tool_name="calculator",
                        arguments={"expression": "6 * 7"}, result={"value": 42}, success=True,
                        started_at=child.started_at, duration_ms=5)  # fmt: skip
    Step.objects.create(run=child, index=1, kind=Step.Kind.FINAL, thought="6 * 7 = 42",
                        started_at=child.started_at + timedelta(milliseconds=10), duration_ms=700)  # fmt: skip
    return parent, child


def _steps_shown(page, run: Run) -> list[str]:
    return page.locator(f"#trace-{run.pk} > li.step").evaluate_all("(steps) => steps.map((s) => s.id.split('-').pop())")


def test_a_sub_agent_run_folds_and_unfolds_in_its_parents_step(browser, live_server, demo):
    parent, child = _tree()
    # The app's CSP refuses inline scripts, rightly; axe (below) is injected by the test.
    context = browser.new_context(viewport={"width": 1280, "height": 900}, locale="en-US", bypass_csp=True)
    page = context.new_page()
    page.set_default_timeout(15_000)
    try:
        _fold_and_unfold(page, live_server, demo, parent, child)
    finally:
        context.close()


def _fold_and_unfold(page, live_server, demo, parent: Run, child: Run) -> None:
    log_in(page, live_server, "operator", demo["operator"])
    page.goto(f"{live_server.url}/runs/{parent.pk}/")
    toggle = page.get_by_role("button", name=f"Sub-agent run #{child.pk}")
    expect(toggle).to_have_attribute("aria-expanded", "false")
    toggle.click()
    nested = page.locator(f"#run-{parent.pk}-step-1 #child-run-{child.pk}")  # inside the delegating step
    expect(nested.locator("li.step")).to_have_count(2)
    expect(toggle).to_have_attribute("aria-expanded", "true")
    expect(nested.locator(".badge.depth")).to_have_text("level 1")
    # On the parent's time axis: the child's first call ran 2 s into the parent run.
    expect(nested.locator(f"#run-{child.pk}-step-0 .step-time")).to_have_text("+2.0 s · 5 ms")
    page.locator(f"#child-run-{child.pk}").scroll_into_view_if_needed()
    os.makedirs(SCREENSHOTS, exist_ok=True)
    page.screenshot(path=os.path.join(SCREENSHOTS, "run-trace-tree.png"))
    toggle.click()  # folded: hidden, not reloaded
    expect(nested).to_be_hidden()
    expect(toggle).to_have_attribute("aria-expanded", "false")
    # By keyboard: the fold is a button, so Enter unfolds it again.
    toggle.focus()
    page.keyboard.press("Enter")
    expect(nested).to_be_visible()
    expect(toggle).to_have_attribute("aria-expanded", "true")
    expect(page.locator(f"#child-run-{child.pk}")).to_have_count(1)  # loaded once
    # The unfolded tree, the filter form and the folded payloads pass axe-core.
    page.add_script_tag(content=AXE)
    assert page.evaluate(RUN_AXE) == []


def test_the_timeline_shows_a_model_calls_bar_beside_the_tool_calls(page, live_server, demo):
    parent, _ = _tree()
    log_in(page, live_server, "operator", demo["operator"])
    page.goto(f"{live_server.url}/runs/{parent.pk}/")
    model = page.evaluate(BAR, f"#run-{parent.pk}-step-0 .bar")
    tool = page.evaluate(BAR, f"#run-{parent.pk}-step-1 .bar")
    # The model call: from the run's start, 2 s of its 10 s; the delegation after it, 3 s long.
    assert model["left"] == pytest.approx(0, abs=1)
    assert model["width"] == pytest.approx(0.2 * model["track"], abs=1)
    assert tool["left"] == pytest.approx(0.2 * tool["track"], abs=1)
    assert tool["width"] == pytest.approx(0.3 * tool["track"], abs=1)
    assert model["colour"] != tool["colour"]  # model and tool apart, as the legend says
    expect(page.locator(f"#run-{parent.pk}-step-0 .step-time")).to_have_text("+0 ms · 2.0 s")
    expect(page.locator(f"#run-{parent.pk}-step-1 .step-time")).to_have_text("+2.0 s · 3.0 s")
    expect(page.locator(".trace-axis").first).to_have_text("0 s10.0 s")


def test_payloads_start_folded_with_their_size(page, live_server, demo):
    parent, _ = _tree()
    log_in(page, live_server, "operator", demo["operator"])
    page.goto(f"{live_server.url}/runs/{parent.pk}/")
    step = page.locator(f"#run-{parent.pk}-step-1")
    arguments = step.locator("details.payload-box", has_text="Arguments")
    expect(arguments.locator("summary")).to_have_text("Arguments 30 B")
    expect(arguments.locator("pre")).to_be_hidden()
    arguments.locator("summary").click()
    expect(arguments.locator("pre")).to_be_visible()
    expect(arguments.locator("pre")).to_contain_text('"task": "What is 6 * 7?"')
    message = page.locator(f"#run-{parent.pk}-step-0 details.message")
    expect(message.locator("summary")).to_contain_text("Model message 30 B")
    expect(message.locator("p")).to_be_hidden()


def test_only_what_went_wrong_keeps_the_failed_steps_and_the_url(page, live_server, demo):
    parent, _ = _tree()
    log_in(page, live_server, "operator", demo["operator"])
    page.goto(f"{live_server.url}/runs/{parent.pk}/")
    assert _steps_shown(page, parent) == ["0", "1", "2", "3", "4"]
    page.get_by_label("Only what went wrong").check()
    expect(page.locator(f"#trace-{parent.pk} > li.step")).to_have_count(2)
    assert _steps_shown(page, parent) == ["2", "3"]
    expect(page.locator(f"#run-{parent.pk}-step-3")).to_contain_text("refused by a guardrail")
    expect(page).to_have_url(f"{live_server.url}/runs/{parent.pk}/?problems=1&q=")
    # The address is the filter: opened again (or shared), the trace is filtered the same.
    page.reload()
    expect(page.get_by_label("Only what went wrong")).to_be_checked()
    assert _steps_shown(page, parent) == ["2", "3"]
    page.get_by_role("link", name="Show every step").click()
    expect(page.locator(f"#trace-{parent.pk} > li.step")).to_have_count(5)


def test_search_within_the_trace_filters_as_one_types(page, live_server, demo):
    parent, _ = _tree()
    log_in(page, live_server, "operator", demo["operator"])
    page.goto(f"{live_server.url}/runs/{parent.pk}/")
    box = page.get_by_label("Search the trace")
    box.press_sequentially("weather")
    expect(page.locator(f"#trace-{parent.pk} > li.step")).to_have_count(2)
    assert _steps_shown(page, parent) == ["2", "4"]  # an argument and the answer
    expect(page).to_have_url(f"{live_server.url}/runs/{parent.pk}/?q=weather")
    expect(box).to_be_focused()  # the box is outside what is swapped: typing goes on
    box.fill("no such words")
    expect(page.locator(f"#trace-empty-{parent.pk}")).to_have_text("No step matches this filter.")
    box.fill("")
    box.press("Enter")
    expect(page.locator(f"#trace-{parent.pk} > li.step")).to_have_count(5)


def test_a_retried_tool_call_shows_its_failed_attempt_on_the_trace(page, live_server, demo):
    """The first start's retried call, made for real: the offline model reads the status service
    the seed starts, which answers 503 once; the invoker retries and the step succeeds."""
    from django.contrib.auth import get_user_model

    from feedback.demo_history import STATUS_TASK, status_service
    from feedback.models import Workspace
    from feedback.strategies.demo import run_phase

    staff = get_user_model().objects.get(username="staff")
    with status_service() as url:
        phase = run_phase("seed", [("general", STATUS_TASK.format(url=url), "")], staff, Workspace.objects.get())
    run = Run.objects.get(pk=phase.run_ids[0])
    log_in(page, live_server, "operator", demo["operator"])
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    call = page.locator(f"#trace-{run.pk} > li.step:not(.failed)", has_text="http_get")
    expect(call.locator(".badge.attempts")).to_have_text("2 attempts")
    attempt = rf"attempt 1 \(\d+ ms\): ToolError HTTP 503 from {re.escape(url)} \(retried\)"
    expect(call.locator("p.attempt")).to_have_text(re.compile(attempt))
    expect(page.locator("#final-output")).to_contain_text(f"{url}: HTTP 200")
