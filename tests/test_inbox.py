"""The reviewer inbox (issue 26.1): one list of confirmations, proposals and runs to score, with
counts, filters, claims and Save & next."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from feedback import services
from feedback.models import AppliedStrategy, Evaluation, InboxClaim, Run, Strategy, ToolConfirmation
from feedback.models.inbox import CLAIM_TTL
from feedback.selectors.inbox import ItemRef, inbox

from .conftest import make_user
from .factories import make_finished_run, make_run
from .test_strategy_lifecycle import make_strategy

pytestmark = pytest.mark.django_db


@pytest.fixture
def work():
    now = timezone.now()
    low = make_finished_run(output="?", score=0.1, created_at=now - timedelta(hours=3), text="low score task")
    unsure = make_finished_run(output="x", score=0.6, created_at=now - timedelta(hours=2), text="disagree task")
    Evaluation.objects.create(run=unsure, round=1, evaluator="judge", kind="judge", score=0.95)
    Evaluation.objects.create(run=unsure, round=1, evaluator="rule", kind="rule", score=0.2)
    proposal = make_strategy()
    AppliedStrategy.objects.create(run=low, strategy_version=proposal.current_version, arm="treatment")
    waiting = make_run(status=Run.Status.AWAITING_CONFIRMATION, text="mail the customer")
    confirmation = ToolConfirmation.objects.create(
        run=waiting, turn=1, tool_call_id="c1", tool_name="send_reply", arguments={"to": "a@example.com"}
    )
    return {"low": low, "unsure": unsure, "proposal": proposal, "confirmation": confirmation}


def keys(box):
    return [i.key for i in box.items]


def test_the_inbox_lists_the_three_kinds_with_their_counts(client, reviewer, work):
    client.force_login(reviewer)
    response = client.get(reverse("feedback-inbox"))
    assert response.status_code == 200
    box = response.context["box"]
    # Confirmations first (a run is paused on each), then proposals, then runs newest first.
    assert keys(box) == [
        f"confirmation-{work['confirmation'].pk}",
        f"proposal-{work['proposal'].pk}",
        f"run-{work['unsure'].pk}",
        f"run-{work['low'].pk}",
    ]
    assert box.counts == {"confirmation": 1, "proposal": 1, "run": 2}
    html = response.content.decode()
    assert 'href="/inbox/"' in html  # the nav link
    assert 'id="inbox-count-run"' in html and "js/inbox.js" in html
    # The first item is the current one, with its decision form.
    assert response.context["current"].key == f"confirmation-{work['confirmation'].pk}"
    assert "data-inbox-decide" in html and "Save & next" in html


def test_the_filters_narrow_the_list_and_the_counts(client, reviewer, work):
    client.force_login(reviewer)
    box = client.get(reverse("feedback-inbox"), {"reason": "low_score"}).context["box"]
    assert keys(box) == [f"run-{work['low'].pk}"]
    assert box.counts == {"confirmation": 0, "proposal": 0, "run": 1}
    box = client.get(reverse("feedback-inbox"), {"strategy": work["proposal"].pk}).context["box"]
    assert keys(box) == [f"proposal-{work['proposal'].pk}", f"run-{work['low'].pk}"]
    response = client.get(reverse("feedback-inbox"), {"kind": "run"})
    box = response.context["box"]
    assert keys(box) == [f"run-{work['unsure'].pk}", f"run-{work['low'].pk}"]
    assert "judge 0.95 · rule 0.20" in response.content.decode()  # why they disagree
    assert box.counts["proposal"] == 1  # the other kinds are still counted, for their links
    # A value no filter knows is ignored, not an error (it is a link's query).
    assert client.get(reverse("feedback-inbox"), {"kind": "nonsense"}).status_code == 200


def test_an_htmx_request_gets_the_inbox_body_alone(client, reviewer, work):
    client.force_login(reviewer)
    response = client.get(reverse("feedback-inbox"), {"kind": "run"}, headers={"HX-Request": "true"})
    html = response.content.decode()
    assert html.lstrip().startswith('<div id="inbox-body"') and "<html" not in html


def test_each_reviewer_sees_only_the_kinds_they_may_decide(client, work):
    from django.contrib.auth.models import Permission

    scorer = make_user("scorer")
    scorer.user_permissions.add(Permission.objects.get(codename="score_run"))
    client.force_login(scorer)
    box = client.get(reverse("feedback-inbox")).context["box"]
    assert box.kinds == ["run"] and {i.kind for i in box.items} == {"run"}
    response = client.post(reverse("feedback-inbox-claim", args=["proposal", work["proposal"].pk]))
    assert response.status_code == 403


def test_a_claim_is_shown_to_others_and_held_against_them(client, reviewer, work):
    other = make_user("other-reviewer", "reviewer")
    ref = ItemRef("run", work["low"].pk)
    client.force_login(reviewer)
    response = client.post(reverse("feedback-inbox-claim", args=["run", work["low"].pk]), {"action": "claim"})
    assert response.status_code == 302 and response["Location"].endswith(f"item=run-{work['low'].pk}")
    assert InboxClaim.objects.get().claimed_by == reviewer
    client.force_login(other)
    html = client.get(reverse("feedback-inbox"), {"item": ref.key}).content.decode()
    assert "Claimed by reviewer until" in html and "Take over" in html
    assert "data-inbox-decide" not in html  # not theirs to decide without taking it over
    with pytest.raises(services.AlreadyClaimed):
        services.inbox_claim(item=ref, user=other)
    # Deciding it anyway is refused, and nothing is recorded.
    response = client.post(reverse("feedback-inbox-decide", args=["run", work["low"].pk]), {"score": "0.5"})
    assert response.status_code == 302
    assert not Evaluation.objects.filter(run=work["low"], kind=Evaluation.Kind.HUMAN).exists()
    # Save & next skips an item someone else holds.
    box = inbox(user=other)
    assert not box.items[-1].free_for(other) and box.items[-1].claim.claimed_by == reviewer


def test_a_claim_can_be_given_back_taken_over_or_lapses(client, reviewer, work):
    other = make_user("other-reviewer", "reviewer")
    ref = ItemRef("proposal", work["proposal"].pk)
    services.inbox_claim(item=ref, user=reviewer)
    # Given back: only one's own.
    assert not services.inbox_unclaim(item=ref, user=other)
    assert services.inbox_unclaim(item=ref, user=reviewer) and not InboxClaim.objects.exists()
    # Taken over, said so.
    services.inbox_claim(item=ref, user=reviewer)
    client.force_login(other)
    response = client.post(reverse("feedback-inbox-claim", args=["proposal", ref.pk]), {"action": "take_over"})
    assert response.status_code == 302 and InboxClaim.objects.get().claimed_by == other
    messages = [str(m) for m in response.wsgi_request._messages]
    assert messages == ["You took the item over from reviewer."]
    # Lapsed: anyone's to take, and shown as unclaimed meanwhile.
    InboxClaim.objects.update(claimed_at=timezone.now() - CLAIM_TTL - timedelta(seconds=1))
    assert inbox(user=reviewer).items[1].claim is None
    assert services.inbox_claim(item=ref, user=reviewer).claimed_by == reviewer


def test_save_and_next_scores_a_run_and_moves_on_in_the_filter(client, reviewer, work):
    client.force_login(reviewer)
    unsure, low = work["unsure"], work["low"]
    services.inbox_claim(item=ItemRef("run", unsure.pk), user=reviewer)
    url = reverse("feedback-inbox-decide", args=["run", unsure.pk]) + "?kind=run"
    response = client.post(url, {"score": "0.4", "comment": "<b>half</b> right", "outcome": "not_accomplished"})
    assert response.status_code == 302
    assert response["Location"] == f"/inbox/?kind=run&item=run-{low.pk}"
    human = Evaluation.objects.get(run=unsure, kind=Evaluation.Kind.HUMAN)
    assert human.score == 0.4 and human.author == reviewer
    assert not InboxClaim.objects.exists()  # decided: nothing left to claim
    html = client.get(response["Location"]).content.decode()
    assert f"run-{unsure.pk}" not in [i.key for i in client.get("/inbox/").context["box"].items]
    assert "Your score for run" in html


def test_save_and_next_skips_items_others_hold(client, reviewer, work):
    other = make_user("other-reviewer", "reviewer")
    services.inbox_claim(item=ItemRef("proposal", work["proposal"].pk), user=other)
    client.force_login(reviewer)
    url = reverse("feedback-inbox-decide", args=["confirmation", work["confirmation"].pk])
    response = client.post(url, {"decision": "reject", "reason": "not to this address"})
    assert response.status_code == 302
    # The proposal is the next in the list, but it is another reviewer's: the run after it.
    assert response["Location"] == f"/inbox/?item=run-{work['unsure'].pk}"
    confirmation = ToolConfirmation.objects.get(pk=work["confirmation"].pk)
    assert confirmation.status == ToolConfirmation.Status.REJECTED and confirmation.decided_by == reviewer


def test_a_proposal_is_decided_from_the_inbox(client, reviewer, work):
    client.force_login(reviewer)
    url = reverse("feedback-inbox-decide", args=["proposal", work["proposal"].pk])
    response = client.post(url, {"action": "reject", "reason": "too narrow"})
    assert response.status_code == 302
    assert Strategy.objects.get(pk=work["proposal"].pk).status == Strategy.Status.REJECTED
    # Promotions are not the inbox's: they read a trial's figures on the strategy's page.
    other = make_strategy(pattern_key="other")
    response = client.post(reverse("feedback-inbox-decide", args=["proposal", other.pk]), {"action": "promote"})
    assert response.status_code == 400
    assert Strategy.objects.get(pk=other.pk).status == Strategy.Status.PROPOSED


def test_an_invalid_decision_keeps_the_item_and_what_was_typed(client, reviewer, work):
    client.force_login(reviewer)
    url = reverse("feedback-inbox-decide", args=["confirmation", work["confirmation"].pk])
    response = client.post(url, {"decision": "reject", "reason": ""})
    assert response.status_code == 400
    assert response.context["current"].key == f"confirmation-{work['confirmation'].pk}"
    assert "Say why you refuse this call." in response.content.decode()
    assert ToolConfirmation.objects.get(pk=work["confirmation"].pk).status == ToolConfirmation.Status.PENDING


def test_an_item_decided_elsewhere_is_said_and_skipped(client, reviewer, work):
    client.force_login(reviewer)
    services.run_add_human_score(run=work["unsure"], user=reviewer, score=1.0)
    response = client.post(reverse("feedback-inbox-decide", args=["run", work["unsure"].pk]), {"score": "0.2"})
    assert response.status_code == 302 and "item=" in response["Location"]
    assert Evaluation.objects.filter(run=work["unsure"], kind=Evaluation.Kind.HUMAN).count() == 1
    response = client.post(reverse("feedback-inbox-claim", args=["run", work["unsure"].pk]))
    assert not InboxClaim.objects.exists()


def test_what_people_typed_is_escaped(client, reviewer):
    make_finished_run(output="<script>alert(1)</script>", score=0.1, text="<img src=x onerror=alert(1)> task")
    client.force_login(reviewer)
    html = client.get(reverse("feedback-inbox")).content.decode()
    assert "<img src=x" not in html and "<script>alert" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html


def test_an_unknown_kind_is_not_found(client, reviewer):
    client.force_login(reviewer)
    assert client.post(reverse("feedback-inbox-claim", args=["dataset", 1])).status_code == 404


def test_a_filter_value_no_longer_offered_drops_alone(client, reviewer, work):
    client.force_login(reviewer)
    box = client.get(reverse("feedback-inbox"), {"kind": "run", "strategy": 999999}).context["box"]
    assert keys(box) == [f"run-{work['unsure'].pk}", f"run-{work['low'].pk}"]


def test_lapsed_claims_are_cleared_when_someone_claims(reviewer, work):
    services.inbox_claim(item=ItemRef("run", work["low"].pk), user=reviewer)
    InboxClaim.objects.update(claimed_at=timezone.now() - CLAIM_TTL - timedelta(seconds=1))
    services.inbox_claim(item=ItemRef("run", work["unsure"].pk), user=reviewer)
    assert list(InboxClaim.objects.values_list("object_id", flat=True)) == [work["unsure"].pk]
