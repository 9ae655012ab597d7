"""Revising a strategy after its paired experiment (issue 25.3): a reviewer keeps the part that
helped (a guardrail alone, no guidance) as a new version, which is a proposal again and is tested
afresh; the old version's verdict never promotes the new one."""

import json

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from feedback.agent.prompts import build_system_prompt
from feedback.datasets.services import dataset_version_create
from feedback.models import Dataset, Experiment, Strategy
from feedback.strategies import services
from feedback.strategies.injection import Injection
from feedback.strategies.services import IllegalTransition
from feedback.strategies.verdicts import promotion_verdict

from .test_strategy_lifecycle import make_strategy

pytestmark = pytest.mark.django_db
GUARDRAIL = {"type": "parameter_rule", "tool": "analyze_text", "param": "text", "action": "file_name_as_path"}


def _experiment(strategy: Strategy, user, *, status: str = "finished", decision: str = "undecided") -> Experiment:
    items = [{"kind": "file_analysis", "text": "Count the words of notes.txt", "expected": 3, "checker": "numeric"}]
    version = dataset_version_create(dataset=Dataset.objects.create(name=f"held out {status}"), user=user, items=items)
    Strategy.objects.filter(pk=strategy.pk).update(status=Strategy.Status.EXPERIMENT)
    return Experiment.objects.create(
        title="x",
        dataset_version=version,
        change_kind="strategy",
        strategy=strategy,
        strategy_version=strategy.current_version,
        status=status,
        decision=decision if status == "finished" else "",
        verdict={"decision": decision, "pairs": 7, "wins": 7, "losses": 0, "ties": 0},
    )


def test_a_strategy_whose_experiment_ended_is_revised_to_its_guardrail_alone_and_tested_afresh(reviewer):
    strategy = make_strategy()
    _experiment(strategy, reviewer, decision="promote")
    strategy.refresh_from_db()
    assert strategy.editable and promotion_verdict(strategy).promotes

    version = services.strategy_edit(
        strategy=strategy, editor=reviewer, reason="the guardrail alone", new_guidance="", guardrails=[GUARDRAIL]
    )
    strategy.refresh_from_db()
    assert (strategy.status, strategy.current_version, version.number) == ("proposed", version, 2)
    event = strategy.events.get(action="edit")
    assert (event.from_status, event.to_status, event.snapshot["new_guidance"]) == ("experiment", "proposed", "")
    # The ended experiment tested version 1: version 2 has no verdict until its own experiment.
    verdict = promotion_verdict(strategy)
    assert (verdict.source, verdict.promotes) == ("none", False)
    services.strategy_approve(strategy=strategy, reviewer=reviewer, reason="on trial")
    with pytest.raises(ValidationError, match="not “promote”"):
        services.strategy_promote(strategy=strategy, reviewer=reviewer, reason="the old experiment said so")
    # A run given the version gets the guardrail and no guidance: the prompt is the base one.
    injection = Injection()
    injection.add(version, "treatment")
    assert injection.guardrails == [GUARDRAIL] and injection.guidance == []
    assert injection.system_prompt_text() == build_system_prompt()


def test_a_strategy_under_test_or_a_change_of_nothing_is_not_revised(reviewer):
    strategy = make_strategy()
    _experiment(strategy, reviewer, status="running")
    strategy.refresh_from_db()
    assert not strategy.editable
    with pytest.raises(IllegalTransition, match="Only a proposed strategy, or one whose experiment has ended"):
        services.strategy_edit(strategy=strategy, editor=reviewer, new_guidance="Sharper.")

    proposal = make_strategy()
    with pytest.raises(ValidationError, match="would change nothing"):
        services.strategy_edit(strategy=proposal, editor=reviewer, new_guidance="  ", guardrails=[])
    assert proposal.versions.count() == 1 and strategy.versions.count() == 1


def test_the_review_page_offers_the_revision_and_keeps_what_was_typed(client, reviewer):
    strategy = make_strategy()
    _experiment(strategy, reviewer)
    client.force_login(reviewer)
    html = client.get(reverse("feedback-strategy-detail", args=[strategy.pk])).content.decode()
    assert "Revise after its experiment" in html and 'name="new_guidance"' in html

    url = reverse("feedback-strategy-edit", args=[strategy.pk])
    data = {"title": "Resolve <paths>", "pattern": "p", "new_guidance": "", "condition": "{}", "guardrails": "[]"}
    response = client.post(url, data)
    html = response.content.decode()
    assert response.status_code == 400 and "would change nothing" in html and "Resolve &lt;paths&gt;" in html
    assert strategy.versions.count() == 1

    data["guardrails"] = json.dumps([GUARDRAIL])
    response = client.post(url, data, follow=True)
    html = response.content.decode()
    assert "Saved as version 2." in html and 'id="guidance">—</dd>' in html
    strategy.refresh_from_db()
    assert strategy.status == "proposed" and strategy.current_version.guardrails == [GUARDRAIL]
    # A proposal again: the page offers it a new experiment.
    assert 'name="dataset_version"' in html
