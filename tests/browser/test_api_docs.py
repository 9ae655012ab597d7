"""In real Chromium: a person makes an API token on its page and uses it from the API's interactive
documentation, which runs from this site's own files under the Content-Security-Policy."""

import pytest
from playwright.sync_api import expect

from .conftest import log_in
from .test_accounts_and_csp import watched  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_token_made_on_its_page_works_in_the_api_docs(watched, live_server, demo, screenshot):  # noqa: F811
    page, violations = watched
    outside = []
    page.on("request", lambda r: outside.append(r.url) if not r.url.startswith(live_server.url) else None)
    log_in(page, live_server, "reviewer", demo["reviewer"])
    page.get_by_role("link", name="API tokens").click()
    page.get_by_label("Name").fill("docs try-out")
    page.get_by_label("Read and write").check()
    page.get_by_role("button", name="Create token").click()
    token = page.locator("#new-token-value").input_value()
    assert token.startswith("afb_") and len(token) == 47
    expect(page.locator("#token-table")).to_contain_text("docs try-out")
    screenshot("api-tokens")
    page.reload()  # shown once: a new request of the page no longer holds it
    assert token not in page.content()

    page.goto(f"{live_server.url}/api/v1/docs")
    expect(page.get_by_text("Agent feedback API")).to_be_visible()
    page.get_by_role("button", name="Authorize").first.click()
    page.locator(".auth-container input").fill(token)
    page.get_by_role("button", name="Apply credentials").click()
    page.locator(".auth-btn-wrapper").get_by_role("button", name="Close").click()
    page.locator("#operations-account-feedback_api_tasks_me").click()
    page.get_by_role("button", name="Try it out").click()
    page.get_by_role("button", name="Execute").click()
    expect(page.locator(".responses-wrapper .live-responses-table")).to_contain_text('"username": "reviewer"')
    screenshot("api-docs")
    assert violations() == [], violations()
    assert outside == []  # no CDN, no validator badge: nothing but this site
