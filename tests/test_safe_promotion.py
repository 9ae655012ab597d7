"""Safe promotion (issue 23.4): promotion follows the verdict, anything else is an explicit, marked
override; the figures each decision was taken on are frozen and shown beside the live ones; an
active strategy is watched against its trial, alerts when it does harm, and rolls back in one click."""

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils import timezone

from feedback.alerts import alerts_evaluate
from feedback.models import AlertIncident, AlertRule, AppliedStrategy, Run, Step, Strategy
from feedback.strategies import services
from feedback.strategies.watch import watch_stats

from .api_helpers import call, token_for
from .factories import make_run
from .test_strategy_lifecycle import make_strategy

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _minimum(settings):
    settings.STRATEGY_TRIAL_MIN_SAMPLES = 10


def _assign(
    strategy: Strategy,
    arm: str,
    scores,
    *,
    outcome: str = "accomplished",
    output: str = "Done.",
    refused: bool = False,
    created_at=None,
) -> list[Run]:
    runs = []
    for score in scores:
        fields = {"created_at": created_at} if created_at else {}
        run = make_run(status=Run.Status.SUCCEEDED, score=score, outcome=outcome, final_output=output, **fields)
        if refused:
            Step.objects.create(
                run=run,
                index=0,
                kind="tool_call",
                tool_name="read_text_file",
                success=False,
                error="Guardrail: call list_directory successfully before read_text_file",
                error_class="GuardrailRefused",
            )
        AppliedStrategy.objects.create(run=run, strategy_version=strategy.current_version, arm=arm)
        runs.append(run)
    return runs


def _on_trial(treatment=(), control=()) -> Strategy:
    strategy = make_strategy(status="trial")
    Strategy.objects.filter(pk=strategy.pk).update(trial_started_at=timezone.now() - timedelta(days=2))
    _assign(strategy, "treatment", treatment, created_at=timezone.now() - timedelta(days=1))
    _assign(strategy, "control", control, created_at=timezone.now() - timedelta(days=1))
    strategy.refresh_from_db()
    return strategy


BETTER = ([0.9, 0.85, 0.95] * 4, [0.5, 0.6, 0.55] * 4)


def test_promotion_follows_the_verdict_and_is_refused_without_it(client, reviewer):
    undecided = _on_trial([0.9, 0.5, 0.7], [0.6, 0.8, 0.4])  # a few runs: "collect more runs"
    with pytest.raises(ValidationError) as refused:
        services.strategy_promote(strategy=undecided, reviewer=reviewer, reason="looks good to me")
    assert "The trial says “collect more runs”, not “promote”" in str(refused.value)
    assert "explicit override" in str(refused.value)
    undecided.refresh_from_db()
    assert undecided.status == "trial" and not undecided.events.exists()
    # The page: promotion disabled, the override offered, and what it means said.
    client.force_login(reviewer)
    html = client.get(reverse("feedback-strategy-detail", args=[undecided.pk])).content.decode()
    assert 'value="promote" disabled' in html and 'value="promote_override"' in html
    assert "The verdict: collect more runs." in html and "Promoting against it is an override" in html
    # The same through the API: a 409 that says why.
    answer = call(
        client,
        "POST",
        f"/strategies/{undecided.pk}/decisions",
        token=token_for(reviewer),
        body={"action": "promote", "reason": "go"},
    )
    assert answer.status_code == 409 and "not “promote”" in answer.json()["detail"]
    # A trial that says promote is promoted, its verdict in the audit.
    better = _on_trial(*BETTER)
    services.strategy_promote(strategy=better, reviewer=reviewer, reason="the trial improved scores")
    better.refresh_from_db()
    event = better.events.get()
    assert (better.status, better.promoted_by_override, event.action) == ("active", False, "promote")
    assert better.promoted_at == event.created_at or abs(better.promoted_at - event.created_at) < timedelta(seconds=5)
    assert event.snapshot["verdict"] == {"source": "trial", "recommendation": "promote", "blockers": []}


def test_an_override_is_its_own_action_with_its_reason_marked_on_the_strategy(client, reviewer):
    s = _on_trial([0.9, 0.5, 0.7], [0.6, 0.8, 0.4])
    services.strategy_promote_override(strategy=s, reviewer=reviewer, reason="customers need it before Monday")
    s.refresh_from_db()
    event = s.events.get()
    assert (s.status, s.promoted_by_override) == ("active", True)
    assert (event.action, event.actor) == ("promote_override", reviewer)
    assert event.reason == "customers need it before Monday"
    assert event.snapshot["override"] is True and event.snapshot["verdict"]["recommendation"] == "collect_more"
    assert event.snapshot["trial"]["treatment"]["n"] == 3  # the figures overridden, frozen
    client.force_login(reviewer)
    html = client.get(reverse("feedback-strategy-detail", args=[s.pk])).content.decode()
    assert 'id="strategy-override"' in html and "Promoted against the verdict" in html
    assert '<strong class="error">Promoted against the verdict (override)</strong>' in html
    # From the form too, as its own action; the API says so on the strategy and in its audit log.
    other = _on_trial([0.9, 0.5, 0.7], [0.6, 0.8, 0.4])
    client.post(reverse("feedback-strategy-decide", args=[other.pk]), {"action": "promote_override", "reason": "x"})
    assert other.events.get().action == "promote_override"
    read = call(client, "GET", f"/strategies/{s.pk}", token=token_for(reviewer)).json()
    assert read["promoted_by_override"] is True and read["events"][0]["action"] == "promote_override"


def test_no_override_promotes_a_harmful_trial_and_a_promoting_one_needs_none(reviewer):
    harmful = _on_trial([0.3, 0.4, 0.35] * 4, [0.8, 0.9, 0.85] * 4)
    with pytest.raises(ValidationError) as refused:
        services.strategy_promote_override(strategy=harmful, reviewer=reviewer, reason="I trust it")
    assert "shows significant harm: no override promotes it" in str(refused.value)
    better = _on_trial(*BETTER)
    with pytest.raises(ValidationError):
        services.strategy_promote_override(strategy=better, reviewer=reviewer, reason="just in case")
    assert not harmful.events.exists() and not better.events.exists()


def test_the_figures_decided_on_are_frozen_and_shown_beside_the_live_ones(client, reviewer):
    s = _on_trial(*BETTER)
    late = make_run(status=Run.Status.RUNNING, created_at=timezone.now() - timedelta(days=1))
    AppliedStrategy.objects.create(run=late, strategy_version=s.current_version, arm="control")
    services.strategy_promote(strategy=s, reviewer=reviewer, reason="the trial improved scores")
    trial = s.events.get().snapshot["trial"]
    assert (trial["treatment"]["n"], trial["control"]["n"], trial["recommendation"]) == (12, 12, "promote")
    assert trial["difference"] == pytest.approx(0.35) and trial["ci_low"] > 0
    assert set(trial["guards"]) == {"error_rate", "tokens", "duration", "cost"}
    assert (trial["split"]["treatment"], trial["split"]["control"]) == (12, 13)
    assert trial["strata"][0]["template"] == "what is # + #?" and trial["strata"][0]["treatment"]["n"] == 12
    # The run in flight when it was decided ends and is scored: the live figures move, the frozen stay.
    Run.objects.filter(pk=late.pk).update(status=Run.Status.SUCCEEDED, score=0.2)
    s.refresh_from_db()
    assert s.events.get().snapshot["trial"]["control"]["n"] == 12
    client.force_login(reviewer)
    html = client.get(reverse("feedback-strategy-detail", args=[s.pk])).content.decode()
    decided = html[html.index("Decided on, and now") :]
    assert "<td>Scored runs (treatment / control)</td><td>12 / 12</td><td>12 / 13</td>" in decided
    assert "<td>Recommendation</td><td>promote</td><td>promote</td>" in decided
    assert "Figures decided on" in html  # in the audit log, beside the decision


def _promoted(treatment_scores, control_scores, *, reviewer) -> Strategy:
    return _promoted_as_is(_on_trial(treatment_scores, control_scores), reviewer)


def test_a_harmful_active_strategy_opens_an_alert_and_rolls_back_in_one_click(client, reviewer):
    rule = AlertRule(name="watch", kind=AlertRule.Kind.HARMFUL_ACTIVE, min_runs=12)
    rule.full_clean()
    rule.save()
    s = _promoted(*BETTER, reviewer=reviewer)
    _assign(s, "active", [0.3, 0.35, 0.25] * 3, outcome="not_accomplished")  # 9 runs: not judged yet
    alerts_evaluate()
    assert not AlertIncident.objects.exists()
    _assign(s, "active", [0.3, 0.35, 0.25], outcome="not_accomplished")
    alerts_evaluate()
    incident = AlertIncident.objects.get()
    assert incident.subject == f"strategy-{s.pk}-active" and incident.figures["harmed"] is True
    assert set(incident.figures["worse"]) == {"score", "accomplished"}
    client.force_login(reviewer)
    page = client.get(reverse("feedback-alert-list")).content.decode()
    assert "harm since its promotion" in page and "12 runs since its promotion against 12 of its trial" in page
    assert f'action="{reverse("feedback-strategy-roll-back-harm", args=[s.pk])}"' in page
    # The strategy page says so too, with the same one-click roll-back.
    detail = client.get(reverse("feedback-strategy-detail", args=[s.pk])).content.decode()
    assert 'id="watch-harm"' in detail and 'id="roll-back-harm"' in detail
    response = client.post(reverse("feedback-strategy-roll-back-harm", args=[s.pk]), follow=True)
    assert f"Strategy #{s.pk} is rolled back." in response.content.decode()
    s.refresh_from_db()
    event = s.events.latest("id")
    assert (s.status, event.action, event.actor) == ("rolled_back", "roll_back", reviewer)
    assert event.reason.startswith("Rolled back for harm since its promotion: score, accomplished rate")
    assert event.snapshot["watch"]["harmed"] is True and event.snapshot["watch"]["runs"] == 12
    alerts_evaluate()
    incident.refresh_from_db()
    assert incident.state == "resolved" and incident.resolved_figures["reason"] == "not_active"


def test_answers_quoting_a_guardrail_and_more_refusals_than_on_trial_are_harm(reviewer):
    s = make_strategy(status="trial")
    Strategy.objects.filter(pk=s.pk).update(trial_started_at=timezone.now() - timedelta(days=2))
    day_ago = timezone.now() - timedelta(days=1)
    _assign(s, "treatment", [0.9, 0.85, 0.95] * 4, refused=True, created_at=day_ago)  # refused on trial too
    _assign(s, "control", [0.5, 0.6, 0.55] * 4, created_at=day_ago)
    s = _promoted_as_is(s, reviewer)
    leaked = "I could not find release-notes.txt: Guardrail: call list_directory successfully before read_text_file"
    _assign(s, "active", [0.9, 0.85, 0.95] * 4, refused=True, output=leaked)
    watch = watch_stats(s)
    assert watch.worse == ["guardrail_text"]  # as many refusals as on trial: the guardrail at work
    refusals = next(f for f in watch.figures if f.name == "refusals")
    assert (refusals.baseline_arm, refusals.baseline.mean, refusals.active.mean) == ("treatment", 1.0, 1.0)


def _promoted_as_is(strategy: Strategy, reviewer) -> Strategy:
    services.strategy_promote(strategy=strategy, reviewer=reviewer, reason="the trial improved scores")
    strategy.refresh_from_db()
    return strategy


def test_a_healthy_active_strategy_raises_no_alarm_and_is_not_rolled_back_in_one_click(client, reviewer):
    rule = AlertRule(name="watch", kind=AlertRule.Kind.HARMFUL_ACTIVE, min_runs=10)
    rule.full_clean()
    rule.save()
    s = _promoted(*BETTER, reviewer=reviewer)
    _assign(s, "active", [0.9, 0.85, 0.95] * 4)
    alerts_evaluate()
    assert not AlertIncident.objects.exists() and not watch_stats(s).harmed
    client.force_login(reviewer)
    response = client.post(reverse("feedback-strategy-roll-back-harm", args=[s.pk]), follow=True)
    assert "Its watch shows no harm now" in response.content.decode()
    s.refresh_from_db()
    assert s.status == "active"


def test_experiment_runs_never_enter_a_trial_or_a_watch(reviewer):
    from feedback.strategies.trials import trial_stats

    s = _on_trial(*BETTER)
    for run in _assign(s, "treatment", [0.1] * 20):
        Run.objects.filter(pk=run.pk).update(purpose=Run.Purpose.EXPERIMENT)
    stats = trial_stats(s)
    assert (stats.treatment.n, stats.split.treatment, stats.recommendation) == (12, 12, "promote")
    _promoted_as_is(s, reviewer)
    for run in _assign(s, "active", [0.1] * 20):
        Run.objects.filter(pk=run.pk).update(purpose=Run.Purpose.PLAYGROUND)
    assert watch_stats(s).runs == 0


def test_a_trial_no_run_has_reached_follows_its_experiment_until_its_first_run(reviewer):
    from feedback.datasets.services import dataset_version_create
    from feedback.models import Dataset, Experiment
    from feedback.strategies.verdicts import promotion_verdict

    strategy = make_strategy(status="experiment")
    items = [{"kind": "file_analysis", "text": "Count the words", "expected": 3, "checker": "numeric"}]
    version = dataset_version_create(dataset=Dataset.objects.create(name="held out"), user=reviewer, items=items)
    experiment = Experiment.objects.create(
        title="x",
        dataset_version=version,
        change_kind="strategy",
        strategy=strategy,
        strategy_version=strategy.current_version,
        status="finished",
        decision="promote",
        verdict={"decision": "promote", "pairs": 7, "wins": 7, "losses": 0, "ties": 0},
    )
    services.strategy_approve(strategy=strategy, reviewer=reviewer, reason="its experiment says promote")
    verdict = promotion_verdict(Strategy.objects.get(pk=strategy.pk))
    assert (verdict.source, verdict.recommendation, verdict.figures["experiment"]) == (
        "experiment",
        "promote",
        experiment.pk,
    )
    # Its trial's first run hands the verdict to the trial, which has nothing to say yet.
    _assign(strategy, "treatment", [0.9])
    verdict = promotion_verdict(Strategy.objects.get(pk=strategy.pk))
    assert (verdict.source, verdict.recommendation) == ("trial", "collect_more")
    with pytest.raises(ValidationError, match="collect more runs"):
        services.strategy_promote(strategy=strategy, reviewer=reviewer, reason="the experiment said so")
    assert Strategy.objects.get(pk=strategy.pk).status == Strategy.Status.TRIAL
