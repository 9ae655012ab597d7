"""Live pages in real Chromium: one poller per page, at its interval, and a live run's clock moved
by the browser between polls."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from feedback.models import Run, Step, ToolConfirmation

from ..factories import make_run
from .conftest import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ELAPSED = "() => parseFloat(document.getElementById('run-elapsed').textContent)"
WAITED = "() => parseFloat(document.getElementById('run-waited').textContent)"


class Watch:
    """The page's requests to the site after it loaded (its polls)."""

    def __init__(self, page) -> None:
        self.page = page
        self.requests: list[str] = []
        page.on("request", lambda r: self.requests.append(r.url) if r.resource_type in ("xhr", "fetch") else None)

    def during(self, seconds: float) -> list[str]:
        self.requests.clear()
        self.page.wait_for_timeout(seconds * 1000)  # (Playwright's events come in meanwhile)
        return list(self.requests)


@pytest.fixture
def watch(page):
    return Watch(page)


def test_a_live_run_s_page_polls_once_a_second_and_its_clock_moves_between_polls(page, live_server, demo, watch):
    start = timezone.now() - timedelta(seconds=20)
    run = make_run(status=Run.Status.RUNNING, started_at=start, step_count=1)
    Step.objects.create(run=run, index=0, kind=Step.Kind.THOUGHT, thought="Hm", started_at=start, duration_ms=4000)
    log_in(page, live_server, "operator", demo["operator"])
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    expect(page.locator(f"#trace-tail-{run.pk}.live")).to_have_count(1)
    # Read as the check passes: a poll's first answer is swapped in reading "—" until live.js ticks.
    elapsed = page.wait_for_function(f"() => {{ const s = ({ELAPSED})(); return s >= 21 && s; }}").json_value()
    requests = watch.during(4.5)
    # One poller, the trace's tail, about once a second, while the elapsed time moves on in the
    # browser between its answers.
    paths = {re.sub(r"\?.*", "", url.removeprefix(live_server.url)) for url in requests}
    assert paths == {f"/runs/{run.pk}/steps/"}, requests
    assert 3 <= len(requests) <= 6, requests
    # (Shown to the last tick of the second; a swap's "—" is gone at the next tick.)
    page.wait_for_function(f"() => ({ELAPSED})() >= {elapsed + 3}", timeout=1000)
    # A change is there at the next poll.
    Step.objects.create(run=run, index=1, kind=Step.Kind.THOUGHT, thought="Aha", started_at=timezone.now())
    Run.objects.filter(pk=run.pk).update(step_count=2)
    expect(page.locator(f"#trace-{run.pk} > li.step")).to_have_count(2)
    expect(page.locator("#run-step-count")).to_have_text("2")


def test_a_run_list_with_ten_active_runs_polls_once_per_interval(page, live_server, demo, watch):
    now = timezone.now()
    runs = [
        make_run(status=Run.Status.RUNNING, text=f"Task {i}", created_at=now - timedelta(minutes=i)) for i in range(10)
    ]
    log_in(page, live_server, "operator", demo["operator"])
    page.goto(f"{live_server.url}/runs/")
    expect(page.locator("#run-table tbody tr")).to_have_count(10)
    requests = watch.during(5)
    # One poller, the table asking its own URL, every 2 s.
    assert {url.removeprefix(live_server.url).split("?")[0] for url in requests} == {"/runs/"}, requests
    assert 2 <= len(requests) <= 4, requests
    # A run that ends shows in its row; the others stay as they are, and the table still polls.
    Run.objects.filter(pk=runs[4].pk).update(status=Run.Status.SUCCEEDED, step_count=3)
    expect(page.locator(f"#run-{runs[4].pk}")).to_contain_text("Answered")
    expect(page.locator("#run-table tbody tr", has_text="Running")).to_have_count(9)
    expect(page.locator("#run-table")).to_have_attribute("hx-trigger", "every 2s")


def test_a_waiting_run_s_working_time_stands_still_while_its_wait_goes_on(page, live_server, demo):
    now = timezone.now()
    run = make_run(status=Run.Status.AWAITING_CONFIRMATION, started_at=now - timedelta(minutes=12), step_count=1)
    Step.objects.create(run=run, index=0, kind=Step.Kind.THOUGHT, thought="Reply?", started_at=run.started_at)
    # Two calls of one turn, asked 2 min ago, wait together: 10 min worked, then waiting.
    for call in ("c1", "c2"):
        ToolConfirmation.objects.create(run=run, turn=1, tool_call_id=call, tool_name="send_reply",
                                        requested_at=now - timedelta(minutes=2))  # fmt: skip
    log_in(page, live_server, "operator", demo["operator"])
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    expect(page.locator("#run-elapsed")).to_have_text("600.0 s")
    waited = page.evaluate(WAITED)
    assert 120 <= waited < 140
    page.wait_for_function(f"() => ({WAITED})() >= {waited + 2}")
    expect(page.locator("#run-elapsed")).to_have_text("600.0 s")  # still
    # Decided, and running again: the wait is closed, the working time moves on from 600 s.
    decided = timezone.now()
    ToolConfirmation.objects.filter(run=run).update(status=ToolConfirmation.Status.APPROVED, decided_at=decided)
    Run.objects.filter(pk=run.pk).update(status=Run.Status.RUNNING)
    expect(page.locator("#run-status")).to_have_text("Running")
    page.wait_for_function(f"() => ({ELAPSED})() >= 602")
    closed = round((decided - (now - timedelta(minutes=2))).total_seconds(), 1)
    assert abs(page.evaluate(WAITED) - closed) <= 0.1  # the time waited stands still now
