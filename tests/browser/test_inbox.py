import re
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from feedback import services
from feedback.models import Evaluation, InboxClaim
from feedback.selectors.inbox import ItemRef

from ..conftest import make_user
from ..factories import make_finished_run
from .conftest import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_reviewer_claims_with_the_keyboard_and_works_through_the_inbox(page, live_server, demo, screenshot):
    now = timezone.now()
    first = make_finished_run(text="What is 17 * 3?", output="41", score=0.1, created_at=now - timedelta(minutes=1))
    second = make_finished_run(text="What is 9 + 9?", output="19", score=0.2, created_at=now - timedelta(minutes=2))
    held = make_finished_run(text="What is 2 ** 5?", output="30", score=0.3, created_at=now - timedelta(minutes=3))
    last = make_finished_run(text="What is 6 * 7?", output="40", score=0.1, created_at=now - timedelta(minutes=4))
    services.inbox_claim(item=ItemRef("run", held.pk), user=make_user("alice", "reviewer"))

    log_in(page, live_server, "reviewer", demo["reviewer"])
    page.get_by_role("link", name="Inbox", exact=True).click()
    expect(page.get_by_role("heading", name="Inbox", exact=True)).to_be_visible()
    page.locator("#inbox-count-run").click()
    expect(page).to_have_url(re.compile(r"/inbox/\?kind=run$"))
    expect(page.locator("#inbox-count-run .badge")).to_have_text("4")
    expect(page.locator(f"#inbox-run-{held.pk}")).to_contain_text("alice")
    expect(page.locator(f"#inbox-run-{first.pk}")).to_have_attribute("aria-current", "true")
    keys_ready = page.locator("html[data-inbox-keys=ready]")
    expect(keys_ready).to_have_count(1)

    # j and k move through the list (htmx swaps the body; the address follows).
    page.keyboard.press("j")
    expect(page.locator(f"#inbox-run-{second.pk}")).to_have_attribute("aria-current", "true")
    expect(page).to_have_url(re.compile(rf"item=run-{second.pk}"))
    page.keyboard.press("k")
    expect(page.locator(f"#inbox-run-{first.pk}")).to_have_attribute("aria-current", "true")

    # c claims the current item; others would now see it as the reviewer's.
    page.keyboard.press("c")
    expect(page.locator("#inbox-claim")).to_contain_text("Claimed by you until")
    expect(page.locator(f"#inbox-run-{first.pk}")).to_contain_text("you")
    assert InboxClaim.objects.get(kind="run", object_id=first.pk).claimed_by.username == "reviewer"
    expect(keys_ready).to_have_count(1)  # the page after the claim listens again

    # ? shows the shortcuts; Escape closes them.
    page.keyboard.press("?")
    expect(page.locator("#inbox-help")).to_be_visible()
    screenshot("inbox-help", full_page=False)
    page.keyboard.press("Escape")
    expect(page.locator("#inbox-help")).to_be_hidden()

    # Score, then s (outside the field) saves and moves to the next item in the filter.
    page.get_by_label("Score (0–1)").fill("0.3")
    page.get_by_label("Comment").fill("51, not 41: <b>off by ten</b>")
    page.locator("#inbox-item-title").click()
    page.keyboard.press("s")
    expect(page.locator(".messages")).to_contain_text(f"Your score for run #{first.pk} is recorded.")
    expect(page).to_have_url(re.compile(rf"/inbox/\?kind=run&item=run-{second.pk}$"))
    expect(page.locator("#inbox-count-run .badge")).to_have_text("3")
    screenshot("inbox")

    # The Save & next button: alice's run is skipped, the one after it is next.
    page.get_by_label("Score (0–1)").fill("0.1")
    page.get_by_role("button", name="Save & next").click()
    expect(page).to_have_url(re.compile(rf"item=run-{last.pk}$"))
    expect(page.locator(f"#inbox-run-{last.pk}")).to_have_attribute("aria-current", "true")

    human = Evaluation.objects.get(run=first, kind="human")
    assert human.score == 0.3 and human.author.username == "reviewer" and "<b>off by ten</b>" in human.feedback
    assert Evaluation.objects.get(run=second, kind="human").score == 0.1
    assert not Evaluation.objects.filter(run=held, kind="human").exists()
    assert not InboxClaim.objects.filter(kind="run", object_id=first.pk).exists()
