import os

import pytest
from playwright.sync_api import sync_playwright

from ..integration.conftest import (  # noqa: F401
    _isolated_folders,
    _worker_settles,
    celery_worker_process,
    shared_folders,
)

# Playwright's sync API runs an event loop in this thread; Django's ORM guard would otherwise
# refuse the test's own database reads.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
SCREENSHOTS = os.path.join(os.path.dirname(__file__), "..", "screenshots")


@pytest.fixture
def demo(db):
    """The demo workspace and users; returns each demo user's password."""
    from feedback.demo import seed_users, seed_workspace

    seed_workspace()
    return {username: password for username, password, _ in seed_users()}


@pytest.fixture(scope="session")
def browser():
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900}, locale="en-US")
    page = context.new_page()
    page.set_default_timeout(15_000)
    yield page
    context.close()


@pytest.fixture
def screenshot(page):
    os.makedirs(SCREENSHOTS, exist_ok=True)

    def take(name: str, *, full_page: bool = True) -> None:
        # full_page=False keeps a long page (a trace of many steps) to one screen for the README.
        page.screenshot(path=os.path.join(SCREENSHOTS, f"{name}.png"), full_page=full_page)

    return take


def log_in(page, live_server, username: str, password: str) -> None:
    page.goto(f"{live_server.url}/accounts/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()
