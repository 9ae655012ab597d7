"""`make demo-loop`, small: the loop must measurably stop repeating the demo's mistakes."""

import pytest

from feedback.models import Strategy, StrategyEvent
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
