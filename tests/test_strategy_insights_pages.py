"""The reviewer's view of an insight list: the list with its votes, what a version changed against
the one before (added, edited old → new, up- or down-voted, removed), escaped; a version's changes
fetched alone by htmx; a live list's waiting update and its adoption; the kind in the list's filter."""

import pytest
from django.urls import reverse

from feedback.models import Strategy, StrategyVersion

from .test_strategy_lifecycle import make_strategy

pytestmark = pytest.mark.django_db


def insight(key, text, votes):
    return {"id": key, "text": text, "votes": votes}


V1 = [insight("a", "Keep <b>me</b>.", 3), insight("b", "Old wording.", 2), insight("c", "Drop me.", 1)]
V2 = [insight("a", "Keep <b>me</b>.", 4), insight("b", "New wording.", 3), insight("d", "Brand new.", 2)]


def insight_strategy(*versions, status=Strategy.Status.PROPOSED, current=None) -> Strategy:
    strategy = Strategy.objects.create(
        title="Insights for arithmetic tasks", pattern_kind="insights", pattern_key="insights:arithmetic", status=status
    )
    made = [
        StrategyVersion.objects.create(
            strategy=strategy,
            number=n,
            title=strategy.title,
            pattern="pairs",
            new_guidance="The insights below.",
            condition={"task_kinds": ["arithmetic"]},
            insights=insights,
        )
        for n, insights in enumerate(versions, start=1)
    ]
    strategy.current_version = made[(current or len(made)) - 1]
    strategy.save()
    return strategy


def page(client, strategy, **params) -> str:
    return client.get(reverse("feedback-strategy-detail", args=[strategy.pk]), params).content.decode()


def test_the_page_shows_the_list_with_votes_and_the_diff_escaped(client, reviewer):
    strategy = insight_strategy(V1, V2)
    client.force_login(reviewer)
    html = page(client, strategy)
    assert "<b>me</b>" not in html and "Keep &lt;b&gt;me&lt;/b&gt;." in html
    listed = html[html.index('id="insight-list"') : html.index("</table>", html.index('id="insight-list"'))]
    assert listed.index("Keep &lt;b&gt;me") < listed.index("New wording.") < listed.index("Brand new.")
    assert "<td>Keep &lt;b&gt;me&lt;/b&gt;.</td><td>4</td>" in listed and "Drop me." not in listed
    diff = html[html.index('id="insight-changes"') :]
    diff = diff[: diff.index("</div>")]
    assert "v2 against v1" in diff
    assert "Added: “Brand new.” (2 votes)" in diff
    assert "Edited: <del>“Old wording.”</del> → “New wording.” (2 → 3)" in diff
    assert "Up-voted: “Keep &lt;b&gt;me&lt;/b&gt;.” (3 → 4)" in diff
    assert "Removed: <del>“Drop me.”</del> (had 1 vote)" in diff
    assert 'hx-get="?insights_version=1"' in html and 'href="?insights_version=1#insight-changes"' in html


def test_a_version_s_changes_come_alone_to_htmx(client, operator):
    strategy = insight_strategy(V1, V2)
    client.force_login(operator)
    html = client.get(
        reverse("feedback-strategy-detail", args=[strategy.pk]), {"insights_version": "1"}, HTTP_HX_REQUEST="true"
    ).content.decode()
    assert html.strip().startswith('<div id="insight-changes"') and "<html" not in html
    assert "v1, the first list" in html and "Added: “Old wording.” (2 votes)" in html
    missing = client.get(
        reverse("feedback-strategy-detail", args=[strategy.pk]), {"insights_version": "9"}, HTTP_HX_REQUEST="true"
    ).content.decode()
    assert "This strategy has no such version." in missing
    # Without htmx the whole page comes, the asked version's changes in it.
    assert "v1, the first list" in page(client, strategy, insights_version="1")


def test_a_live_list_s_update_waits_and_a_reviewer_adopts_it(client, reviewer):
    strategy = insight_strategy(V1, V2, status=Strategy.Status.ACTIVE, current=1)
    client.force_login(reviewer)
    html = page(client, strategy)
    assert "Version 2 waits for a reviewer: v1 stays in use until it is adopted." in html
    waiting = html[html.index('id="insight-pending-changes"') :]
    assert "Edited: <del>“Old wording.”</del> → “New wording.”" in waiting[: waiting.index("</div>")]
    assert 'id="insight-adopt"' in html and 'name="number" value="2"' in html
    url = reverse("feedback-strategy-adopt", args=[strategy.pk])
    response = client.post(url, {"number": "2", "reason": "Checked the pairs."})
    assert response.status_code == 302
    strategy.refresh_from_db()
    assert strategy.current_version.number == 2
    assert "Version 2 waits" not in page(client, strategy)


def test_an_operator_sees_the_waiting_update_but_cannot_adopt_it(client, operator):
    strategy = insight_strategy(V1, V2, status=Strategy.Status.ACTIVE, current=1)
    client.force_login(operator)
    assert 'id="insight-adopt"' not in page(client, strategy)
    assert client.post(reverse("feedback-strategy-adopt", args=[strategy.pk]), {"number": "2"}).status_code == 403
    strategy.refresh_from_db()
    assert strategy.current_version.number == 1


def test_an_adoption_without_a_reason_or_a_version_is_refused_with_a_message(client, reviewer):
    strategy = insight_strategy(V1, V2, status=Strategy.Status.ACTIVE, current=1)
    client.force_login(reviewer)
    url = reverse("feedback-strategy-adopt", args=[strategy.pk])
    html = client.post(url, {"number": "2", "reason": ""}, follow=True).content.decode()
    assert "Say why" in html
    html = client.post(url, {"number": "x", "reason": "why"}, follow=True).content.decode()
    assert "Say which version to adopt." in html
    strategy.refresh_from_db()
    assert strategy.current_version.number == 1


def test_the_list_filters_by_kind(client, operator):
    insights = insight_strategy(V1)
    other = make_strategy()
    client.force_login(operator)
    html = client.get(reverse("feedback-strategy-list"), {"kind": "insights"}).content.decode()
    assert f'id="strategy-{insights.pk}"' in html and f'id="strategy-{other.pk}"' not in html
    assert '<option value="insights" selected>Insights from failure/success pairs</option>' in html
    assert "3 insights: Keep &lt;b&gt;me&lt;/b&gt;." in html
    html = client.get(reverse("feedback-strategy-list"), {"kind": "nonsense"}).content.decode()
    assert f'id="strategy-{insights.pk}"' in html and f'id="strategy-{other.pk}"' in html


def test_another_kind_shows_no_insight_section(client, operator):
    client.force_login(operator)
    assert 'id="insights"' not in page(client, make_strategy())
