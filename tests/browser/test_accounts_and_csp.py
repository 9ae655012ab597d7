"""In real Chromium: the Content-Security-Policy refuses nothing the site does (htmx swaps, polling,
the charts, the waterfall), and an htmx request that cannot get its fragment leaves the page in a
state a person understands."""

import re
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.contrib.sessions.backends.cached_db import SessionStore
from django.utils import timezone
from playwright.sync_api import expect

from feedback import roles
from feedback.models import Run, Step

from ..factories import make_run
from .conftest import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Every violation, reported by the page itself (the init script runs before any of the page's own).
COLLECT = """window.__violations = [];
document.addEventListener("securitypolicyviolation", (e) =>
  window.__violations.push(`${e.violatedDirective} ${e.blockedURI} ${e.sourceFile}:${e.lineNumber}`));"""
SPAN = "(id) => parseInt(getComputedStyle(document.getElementById(`trace-${id}`)).getPropertyValue('--span'))"
BAR_WIDTH = "(id) => document.querySelector(`#trace-${id} .bar`).getBoundingClientRect().width"


@pytest.fixture
def watched(page):
    """The page, and every CSP violation it meets (events and console messages)."""
    console = []
    page.add_init_script(COLLECT)
    page.on("console", lambda m: console.append(m.text) if "Content Security Policy" in m.text else None)

    def violations() -> list[str]:
        return console + page.evaluate("window.__violations || []")

    return page, violations


def _live_run() -> Run:
    start = timezone.now() - timedelta(seconds=20)
    run = make_run(status=Run.Status.RUNNING, started_at=start, step_count=1)
    Step.objects.create(run=run, index=0, kind=Step.Kind.THOUGHT, thought="Hm", started_at=start, duration_ms=4000)
    return run


def test_the_main_pages_run_under_the_policy_without_a_violation(watched, live_server, demo):
    page, violations = watched
    seen: dict[str, list[str]] = {}

    def visit(path: str) -> None:
        response = page.goto(f"{live_server.url}{path}")
        # Enforced (not report-only), so the browser refuses what it does not allow.
        assert "script-src 'self'" in response.headers["content-security-policy"], path
        seen[path] = violations()

    visit("/accounts/login/")
    visit("/accounts/password_reset/")
    # Staff: the task form swaps the kind's help in (htmx) as the kind changes.
    log_in(page, live_server, "staff", demo["staff"])
    expect(page.get_by_role("heading", name="Submit a task")).to_be_visible()
    page.get_by_label("Kind").select_option("arithmetic")
    expect(page.locator("#kind-help")).to_contain_text("the calculator computes it exactly")
    seen["/tasks/new/ (kind swapped)"] = violations()
    visit("/accounts/password_change/")
    page.get_by_role("button", name="Log out").click()

    # A reviewer sees the most: a live run polling (its waterfall laid out and rescaled as it goes),
    # the metrics' charts, the strategies, the review queue.
    run = _live_run()
    log_in(page, live_server, "reviewer", demo["reviewer"])
    for path in ("/runs/", "/metrics/", "/strategies/", "/review/", "/inbox/", "/confirmations/", "/schedules/"):
        visit(path)
    page.goto(f"{live_server.url}/metrics/")
    expect(page.locator("html")).to_have_attribute("data-charts-ready", "true")
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    expect(page.locator(f"#trace-tail-{run.pk}.live")).to_have_count(1)
    span = page.evaluate(SPAN, run.pk)
    assert 20_000 <= span < 40_000 and page.evaluate(BAR_WIDTH, run.pk) > 10
    page.wait_for_function(f"() => ({SPAN})({run.pk}) >= {span + 2000}")  # two seconds later
    Step.objects.create(run=run, index=1, kind=Step.Kind.TOOL_CALL, tool_name="calculator", started_at=timezone.now())
    Run.objects.filter(pk=run.pk).update(step_count=2)
    expect(page.locator(f"#trace-{run.pk} > li.step")).to_have_count(2)  # appended by the poll
    seen[f"/runs/{run.pk}/ (polled)"] = violations()

    # The admin too (Django 6's has no inline script).
    page.get_by_role("button", name="Log out").click()
    get_user_model().objects.create_superuser("root", "root@example.com", "root-password-1")
    log_in(page, live_server, "root", "root-password-1")
    visit("/admin/")
    visit("/admin/feedback/loginfailures/")
    visit("/admin/feedback/run/")

    assert len(seen) == 15
    assert all(found == [] for found in seen.values()), {path: found for path, found in seen.items() if found}


def test_a_page_whose_session_ended_goes_to_log_in_and_comes_back(page, live_server, demo):
    run = _live_run()
    log_in(page, live_server, "operator", demo["operator"])
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    expect(page.locator(f"#trace-tail-{run.pk}.live")).to_have_count(1)
    # The session ends behind the page's back (expired, or logged out in another tab).
    (cookie,) = [c for c in page.context.cookies() if c["name"] == "sessionid"]
    SessionStore(session_key=cookie["value"]).delete()
    # The next poll takes the whole page to the login page, which will bring it back here.
    expect(page).to_have_url(re.compile(rf"/accounts/login/\?next=/runs/{run.pk}/$"))
    expect(page.locator("#trace-" + str(run.pk))).to_have_count(0)
    page.get_by_label("Username").fill("operator")
    page.get_by_label("Password").fill(demo["operator"])
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(re.compile(rf"/runs/{run.pk}/$"))
    expect(page.locator(f"#trace-{run.pk} > li.step")).to_have_count(1)


def test_a_refused_htmx_request_is_said_in_the_banner_not_swapped_in(page, live_server, demo):
    run = _live_run()
    log_in(page, live_server, "operator", demo["operator"])
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    expect(page.locator(f"#trace-tail-{run.pk}.live")).to_have_count(1)
    banner = page.locator("#request-error")
    expect(banner).to_be_hidden()
    operator = get_user_model().objects.get(username="operator")
    operator.groups.remove(Group.objects.get(name=roles.OPERATOR))  # the role is taken away
    expect(banner).to_be_visible()
    expect(banner).to_contain_text("This was not allowed")
    # The page stays as it was: its summary and trace, no error page inside them.
    expect(page.locator("#run-status")).to_have_text("Running")
    expect(page.locator(f"#trace-{run.pk} > li.step")).to_have_count(1)
    expect(page.locator("main")).not_to_contain_text("You are not allowed to do this.")
    # Given back, the next poll succeeds and the banner goes.
    operator.groups.add(Group.objects.get(name=roles.OPERATOR))
    expect(banner).to_be_hidden()
