"""The dashboard in real Chromium: live traces, run list filters, nested runs, languages."""

import re
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone
from playwright.sync_api import expect

from feedback.models import Run, Step, Task, ToolConfirmation
from feedback.services import confirmation_decide
from feedback.traces import TRACE_PAGE_SIZE

from ..factories import make_run
from .conftest import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_staff_watch_a_trace_fill_in_live_without_a_reload(page, live_server, celery_worker_process, demo, screenshot):
    log_in(page, live_server, "staff", demo["staff"])
    # Changing the kind swaps its help in place; what was typed stays.
    page.get_by_label("Task").fill("Triage the emails in inbox/ and reply to the urgent ones")
    page.get_by_label("Kind").select_option("email_triage")
    expect(page.locator("#kind-help")).to_contain_text("reviewer's confirmation")
    expect(page.get_by_label("Task")).to_have_value("Triage the emails in inbox/ and reply to the urgent ones")
    page.get_by_label("Workspace").select_option(label="demo")
    page.get_by_role("button", name="Submit").click()

    expect(page).to_have_url(re.compile(r"/runs/\d+/$"))
    # The run stops for a person's confirmation of its replies: the page waits with it.
    expect(page.locator("#run-status")).to_have_text("Awaiting confirmation", timeout=30_000)
    steps = page.locator("ol.trace > li.step")
    before = steps.count()
    assert before > 0
    # Mark what is on screen: appended steps leave these very elements in place.
    page.evaluate("document.querySelectorAll('ol.trace > li.step').forEach(li => li.dataset.seen = '1')")
    page.evaluate("window.notReloaded = true")

    run = Run.objects.get()
    reviewer = get_user_model().objects.get(username="reviewer")
    for confirmation in ToolConfirmation.objects.filter(run=run, status=ToolConfirmation.Status.PENDING):
        confirmation_decide(confirmation=confirmation, user=reviewer, approve=True)

    expect(page.locator("#run-status")).to_have_text("Answered", timeout=30_000)
    expect(page.locator("#final-output")).to_be_visible()
    expect(steps).to_have_count(Step.objects.filter(run=run).count())
    assert steps.count() > before
    assert page.locator("ol.trace > li.step[data-seen='1']").count() == before
    assert page.evaluate("window.notReloaded === true")
    expect(page.locator(".trace-tail")).to_have_count(0)  # ended: no more polling
    expect(page.get_by_role("button", name="Re-run")).to_be_visible()
    page.locator("ol.trace").scroll_into_view_if_needed()
    page.evaluate("window.scrollBy(0, -80)")
    screenshot("run-trace", full_page=False)


def test_staff_upload_a_file_and_the_run_reads_it(page, live_server, celery_worker_process, demo, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("One two three four five six seven.\n")
    log_in(page, live_server, "staff", demo["staff"])
    page.get_by_label("Kind").select_option("file_analysis")
    page.get_by_label("Task").fill("Summarise notes.txt and count its words")
    page.get_by_label("Files (optional)").set_input_files(str(notes))
    page.get_by_role("button", name="Submit").click()
    expect(page.locator(".message.info")).to_contain_text("1 file(s) added")
    expect(page.locator("#run-status")).to_have_text("Answered", timeout=30_000)
    expect(page.locator("#final-output")).to_contain_text("7 words")


def test_an_operator_filters_the_run_list_and_the_url_keeps_the_filters(page, live_server, demo, screenshot):
    now = timezone.now()
    for i, (text, kind, status, score, outcome) in enumerate(
        [
            ("Classify the emails in inbox/ and flag the urgent ones", Task.Kind.EMAIL_TRIAGE, "succeeded", 0.92,
             "accomplished"),
            ("Triage the support emails from last week", Task.Kind.EMAIL_TRIAGE, "failed", 0.1, "not_accomplished"),
            ("Summarise report.txt and count its words", Task.Kind.FILE_ANALYSIS, "succeeded", 0.8, "accomplished"),
            ("What is (17 * 23 + 4) / 5?", Task.Kind.ARITHMETIC, "succeeded", 0.35, "not_accomplished"),
            ("What is 6 * 7?", Task.Kind.ARITHMETIC, "running", None, "unknown"),
        ]
    ):  # fmt: skip
        make_run(text=text, kind=kind, status=status, score=score, outcome=outcome,
                 created_at=now - timedelta(minutes=i))  # fmt: skip
    log_in(page, live_server, "operator", demo["operator"])
    page.get_by_role("link", name="Runs").click()
    expect(page.locator("#run-table tbody tr")).to_have_count(5)
    screenshot("run-list")

    page.get_by_label("Search").fill("emails")
    page.get_by_label("Status").select_option("succeeded")
    page.get_by_role("button", name="Filter").click()
    expect(page).to_have_url(re.compile(r"q=emails.*status=succeeded"))
    expect(page.locator("#run-table tbody tr")).to_have_count(1)
    expect(page.locator("#run-table")).to_contain_text("Classify the emails")

    # The URL is the whole state: opened afresh it shows the same list.
    page.goto(page.url)
    expect(page.locator("#run-table tbody tr")).to_have_count(1)
    page.get_by_role("link", name="Clear filters").first.click()
    page.get_by_label("Sort").select_option("score")
    page.get_by_role("button", name="Filter").click()
    expect(page.locator("#run-table tbody tr").first).to_contain_text("0.92")
    screenshot("run-list-filtered")


def test_the_run_list_shows_new_runs_as_they_arrive(page, live_server, demo):
    make_run(text="An older run", created_at=timezone.now() - timedelta(minutes=5))
    log_in(page, live_server, "operator", demo["operator"])
    page.get_by_role("link", name="Runs").click()
    expect(page.locator("#run-table tbody tr")).to_have_count(1)
    make_run(text="A run that arrived while the list was open")
    make_run(text="And another one")
    # The first page polls itself every 5 s (no row is active): the new runs come in on top.
    expect(page.locator("#run-table tbody tr")).to_have_count(3, timeout=20_000)
    expect(page.locator("#run-table tbody tr").first).to_contain_text("And another one")


def test_a_sub_agent_run_expands_in_place_and_long_traces_load_on_scroll(page, live_server, demo, screenshot):
    start = timezone.now() - timedelta(minutes=5)
    parent = make_run(text="Ask a helper for 6 * 7", status=Run.Status.SUCCEEDED, started_at=start,
                      finished_at=start + timedelta(seconds=4), final_output="The sub-agent says 42.",
                      system_prompt="You are a careful agent.", tokens_in=812, tokens_out=64)  # fmt: skip
    Step.objects.create(run=parent, index=0, kind=Step.Kind.THOUGHT, thought="I will delegate the arithmetic.",
                        started_at=start, duration_ms=300)  # fmt: skip
    delegate = Step.objects.create(run=parent, index=1, kind=Step.Kind.TOOL_CALL, tool_name="delegate",
                                   arguments={"task": "What is 6 * 7?", "kind": "arithmetic"}, success=True,
                                   started_at=start + timedelta(milliseconds=400), duration_ms=2600)  # fmt: skip
    Step.objects.create(run=parent, index=2, kind=Step.Kind.TOOL_CALL, tool_name="http_get", success=False,
                        arguments={"url": "http://example.invalid"}, error="Name or service not known",
                        error_class="ToolError", started_at=start + timedelta(seconds=3), duration_ms=400)  # fmt: skip
    Step.objects.create(run=parent, index=3, kind=Step.Kind.FINAL, thought="The sub-agent says 42.",
                        started_at=start + timedelta(milliseconds=3500), duration_ms=100)  # fmt: skip
    child = make_run(text="What is 6 * 7?", status=Run.Status.SUCCEEDED, parent=parent, parent_step=delegate,
                     final_output="6 * 7 = 42", started_at=start + timedelta(milliseconds=500),
                     finished_at=start + timedelta(seconds=3))  # fmt: skip
    Step.objects.create(run=child, index=0, kind=Step.Kind.TOOL_CALL, tool_name="calculator",
                        arguments={"expression": "6 * 7"}, result={"value": 42}, success=True)  # fmt: skip
    Step.objects.create(run=child, index=1, kind=Step.Kind.FINAL, thought="6 * 7 = 42")

    log_in(page, live_server, "operator", demo["operator"])
    page.goto(f"{live_server.url}/runs/{parent.pk}/")
    expect(page.locator(f"#trace-{parent.pk} > li.step")).to_have_count(4)
    expect(page.locator(".problems")).to_contain_text("1 step went wrong")
    page.get_by_role("button", name=f"Sub-agent run #{child.pk}").click()
    nested = page.locator(f"#child-run-{child.pk}")
    expect(nested.locator("li.step")).to_have_count(2)
    expect(nested).to_contain_text("6 * 7 = 42")
    expect(page).to_have_url(f"{live_server.url}/runs/{parent.pk}/")  # in place, no navigation
    page.locator(f"#child-run-{child.pk}").scroll_into_view_if_needed()
    screenshot("run-nested", full_page=False)

    # Copy as JSON: the clipboard gets the step, exactly.
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server.url)
    page.locator(f"#run-{parent.pk}-step-1 > .stephead [data-copy-json]").click()
    expect(page.locator(f"#run-{parent.pk}-step-1 > .stephead [data-copy-json]")).to_have_text("Copied")
    assert '"tool_name": "delegate"' in page.evaluate("navigator.clipboard.readText()")

    # A long trace: the first page only, the next ones as the end comes into view.
    end = start + timedelta(seconds=60)
    long = make_run(text="A long run", status=Run.Status.SUCCEEDED, started_at=start, finished_at=end)
    Step.objects.bulk_create(
        Step(
            run=long,
            index=i,
            kind=Step.Kind.THOUGHT,
            thought=f"thought {i}",
            started_at=start + timedelta(milliseconds=200 * i),
            duration_ms=150,
        )
        for i in range(2 * TRACE_PAGE_SIZE + TRACE_PAGE_SIZE // 2)
    )
    page.goto(f"{live_server.url}/runs/{long.pk}/")
    steps = page.locator(f"#trace-{long.pk} > li.step")
    expect(steps).to_have_count(TRACE_PAGE_SIZE)
    page.locator(f"#trace-tail-{long.pk}").scroll_into_view_if_needed()
    expect(steps).to_have_count(2 * TRACE_PAGE_SIZE)
    page.locator(f"#trace-tail-{long.pk}").scroll_into_view_if_needed()
    expect(steps).to_have_count(2 * TRACE_PAGE_SIZE + TRACE_PAGE_SIZE // 2)
    expect(page.locator(f"#trace-tail-{long.pk}")).to_have_count(0)


def test_the_interface_switches_to_simplified_chinese(page, live_server, demo, screenshot):
    make_run(text="Summarise report.txt and count its words", kind=Task.Kind.FILE_ANALYSIS, status="succeeded")
    make_run(text="总结 docs/meeting-notes.md 的要点", kind=Task.Kind.GENERAL, status="failed", score=0.2)
    log_in(page, live_server, "reviewer", demo["reviewer"])
    expect(page.get_by_role("link", name="Review queue")).to_be_visible()
    page.get_by_label("Language").select_option("zh-hans")
    page.get_by_role("button", name="Switch").click()
    nav = page.get_by_role("navigation", name="主导航")
    expect(nav.get_by_role("link", name="运行")).to_be_visible()
    expect(nav.get_by_role("link", name="评审队列")).to_be_visible()
    expect(nav.get_by_role("link", name="策略")).to_be_visible()
    expect(page.locator("html")).to_have_attribute("lang", "zh-hans")
    screenshot("zh-hans")
    page.get_by_label("语言").select_option("en")
    page.get_by_role("button", name="切换").click()
    expect(page.get_by_role("link", name="Review queue")).to_be_visible()


def test_the_layout_fits_a_phone(page, live_server, demo, screenshot):
    page.set_viewport_size({"width": 390, "height": 844})
    log_in(page, live_server, "staff", demo["staff"])
    expect(page.get_by_role("heading", name="Submit a task")).to_be_visible()
    # Nothing wider than the screen: no sideways scrolling on a phone.
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    screenshot("phone-submit")
