"""The playground: a run re-run with an edited prompt or a strategy's edited guidance, marked and
kept apart, shown beside the original; bad edits refused with nothing saved."""

import pytest
from django.urls import reverse

from feedback.agent.loop import execute_run
from feedback.models import AppliedStrategy, PlaygroundRun, Run, Strategy, StrategyVersion

from .conftest import make_user
from .factories import make_run

pytestmark = pytest.mark.django_db


def _original(owner):
    run = make_run(user=owner, status="succeeded", text="What is (12 + 7) * 3?", kind="arithmetic")
    Run.objects.filter(pk=run.pk).update(system_prompt="You are an agent.", final_output="It is 57.")
    run.refresh_from_db()
    return run


def test_a_reviewer_re_runs_a_run_with_a_strategy_s_edited_guidance_beside_the_original(client, sent_tasks):
    reviewer = make_user("rev", "reviewer")
    original = _original(make_user("owner", "staff"))
    strategy = Strategy.objects.create(title="Use the calculator", pattern_kind="manual")
    strategy.current_version = StrategyVersion.objects.create(
        strategy=strategy, number=1, pattern="p", new_guidance="Call the calculator.",
        guardrails=[{"type": "tool_disabled", "tool": "http_get"}],
    )  # fmt: skip
    strategy.save()
    client.force_login(reviewer)
    page = client.get(reverse("feedback-run-playground", args=[original.pk]) + f"?strategy={strategy.pk}")
    html = page.content.decode()
    assert "Call the calculator." in html and "You are an agent." in html and "No re-run yet." in html
    response = client.post(
        reverse("feedback-run-playground", args=[original.pk]),
        {
            "system_prompt": "You are an agent.",
            "strategy": strategy.pk,
            "guidance": "<i>Always</i> call the calculator.",
        },
    )
    assert response.status_code == 302
    rerun = PlaygroundRun.objects.get()
    assert rerun.system_prompt == ""  # the prompt as it was is no edit
    run = rerun.run
    assert run.purpose == Run.Purpose.PLAYGROUND and run.task.text == original.task.text
    assert run.task.created_by == reviewer
    execute_run(run.pk)
    run.refresh_from_db()
    assert "- <i>Always</i> call the calculator." in run.system_prompt
    assert "- Call the calculator." not in run.system_prompt  # the edit replaced the strategy's own
    assert AppliedStrategy.objects.get(run=run).strategy_version == strategy.current_version
    assert run.final_output and "57" in run.final_output
    html = client.get(reverse("feedback-run-playground", args=[original.pk])).content.decode()
    assert f"?a={original.pk}&amp;b={run.pk}" in html and "&lt;i&gt;Always&lt;/i&gt;" in html
    assert f"strategy #{strategy.pk} v1" in html
    # The list's poll stops once no re-run is live.
    live = client.get(reverse("feedback-run-playground", args=[original.pk]), headers={"HX-Request": "true"})
    assert live.status_code == 286 and f"#{run.pk}" in live.content.decode()


def test_an_edited_system_prompt_replaces_the_whole_prompt(client, sent_tasks):
    reviewer = make_user("rev", "reviewer")
    original = _original(reviewer)
    client.force_login(reviewer)
    client.post(reverse("feedback-run-playground", args=[original.pk]), {"system_prompt": "Answer in one word."})
    run = PlaygroundRun.objects.get().run
    execute_run(run.pk)
    run.refresh_from_db()
    assert run.system_prompt == "Answer in one word."


def test_an_empty_edit_and_an_unseen_run_are_refused_with_nothing_saved(client):
    reviewer = make_user("rev", "reviewer")
    original = _original(make_user("owner", "staff"))
    client.force_login(reviewer)
    response = client.post(
        reverse("feedback-run-playground", args=[original.pk]), {"system_prompt": "You are an agent.", "note": "x"}
    )
    assert response.status_code == 400 and "without an edit it is a plain re-run" in response.content.decode()
    assert 'value="x"' in response.content.decode()
    staff = make_user("staff2", "staff")
    client.force_login(staff)
    assert client.get(reverse("feedback-run-playground", args=[original.pk])).status_code == 403
    assert not PlaygroundRun.objects.exists() and Run.objects.count() == 1


def test_playground_runs_stay_out_of_the_metrics_mining_and_review(client, sent_tasks):
    from datetime import timedelta

    from django.utils import timezone

    from feedback import metrics, selectors

    reviewer = make_user("rev", "reviewer")
    original = _original(reviewer)
    client.force_login(reviewer)
    client.post(reverse("feedback-run-playground", args=[original.pk]), {"guidance": "Check twice."})
    run = PlaygroundRun.objects.get().run
    execute_run(run.pk)
    Run.objects.filter(pk=run.pk).update(score=0.05)
    window = metrics.Window(since=timezone.now() - timedelta(days=1), until=timezone.now() + timedelta(minutes=1))
    assert metrics.score_summary(window)["runs"] == 1  # the original only
    assert run.pk not in {r.pk for r in selectors.review_queue()}
    page = client.get(reverse("feedback-run-detail", args=[original.pk])).content.decode()
    assert "Open in playground" in page
