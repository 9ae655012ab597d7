import pytest
from playwright.sync_api import expect

from feedback.demo import seed_users
from feedback.models import Strategy

from ..strategy_history import planted_history
from .conftest import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_reviewer_mines_reviews_and_approves_a_strategy(page, live_server, settings, screenshot):
    settings.STRATEGY_LOW_SCORE = 0.5
    passwords = {u: p for u, p, _ in seed_users()}
    planted_history()
    from feedback.strategies.proposals import mine_and_propose

    mine_and_propose(window_days=30)  # what "Analyse now" queues for the worker
    strategy = Strategy.objects.get(pattern_kind="error_signature")

    log_in(page, live_server, "reviewer", passwords["reviewer"])
    page.get_by_role("link", name="Strategies").click()
    expect(page.locator(f"#strategy-{strategy.pk}")).to_contain_text("Proposed")
    screenshot("strategy-list")
    page.locator(f"#strategy-{strategy.pk} a").click()

    expect(page.locator("#guidance")).to_contain_text("Before calling read_text_file")
    expect(page.locator(".diff .diff-add").first).to_be_visible()
    expect(page.get_by_text("12 of 12 failing runs show it, against 0 of 20 succeeding runs")).to_be_visible()
    screenshot("strategy-detail", full_page=False)

    page.get_by_label("Reason", exact=True).fill("Resolving paths is safe; let us measure it.")
    page.get_by_role("button", name="Approve for trial").click()
    expect(page.locator("#strategy-status")).to_have_text("On trial")
    expect(page.locator(".message.success")).to_contain_text("is now on trial")
    expect(page.locator("#audit-log tbody tr").first).to_contain_text("Approved for trial")
    expect(page.locator("#audit-log tbody tr").first).to_contain_text("Resolving paths is safe")
    strategy.refresh_from_db()
    assert strategy.status == "trial"
