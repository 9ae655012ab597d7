"""`make demo-loop`, small: the loop must measurably stop repeating the demo's mistakes."""

import pytest

from feedback.models import AppliedStrategy, Strategy, StrategyEvent
from feedback.strategies.demo import run_demo_loop

pytestmark = pytest.mark.django_db


def test_the_loop_lowers_repeated_errors_and_raises_the_score(settings):
    settings.STRATEGY_TRIAL_MIN_SAMPLES = 8
    lines: list[str] = []
    figures = run_demo_loop(tasks_per_phase=90, seed=7, auto_approve=True, out=lines.append)
    before, after = figures["before"], figures["after"]
    assert after["repeated errors per run"] < before["repeated errors per run"]
    assert after["average score"] > before["average score"]
    promoted = Strategy.objects.get(status="active")
    assert promoted.current_version.guardrails[0]["action"] == "resolve_in_workspace"
    assert StrategyEvent.objects.filter(action="promote", actor__username="demo-loop").count() == 1
    # Everything else that was trialled ended rolled back, by the rule or automatically.
    assert set(Strategy.objects.exclude(pk=promoted.pk).values_list("status", flat=True)) == {"rolled_back"}
    assert any(line.startswith("repeated errors per run") for line in "\n".join(lines).splitlines())


def test_without_auto_approve_it_stops_at_the_proposals():
    figures = run_demo_loop(tasks_per_phase=40, seed=7, out=lambda line: None)
    assert set(figures) == {"before", "proposed"}
    assert not Strategy.objects.exclude(status="proposed").exists()


def test_the_trial_takes_the_best_supported_proposals_and_runs_the_tasks_they_apply_to(settings):
    # On a real model a run costs half a minute: every trial run must count for a trial.
    settings.STRATEGY_TRIAL_MIN_SAMPLES = 8
    figures = run_demo_loop(
        tasks_per_phase=40, seed=7, auto_approve=True, trial_strategies=1, trial_batch=20, trial_limit=40,
        out=lambda line: None,
    )  # fmt: skip
    proposed = Strategy.objects.filter(status="proposed")
    trialled = Strategy.objects.exclude(status="proposed").get()
    assert proposed.exists()  # the others wait for a reviewer
    assert trialled.support >= max(proposed.values_list("support", flat=True))
    in_trial = AppliedStrategy.objects.filter(strategy_version__strategy=trialled).exclude(arm="active")
    assert figures["trial"]["runs"] == in_trial.values("run").distinct().count() > 0
