"""`make demo-loop`, small: the loop must measurably stop repeating the demo's mistakes."""

import pytest

from feedback.models import AppliedStrategy, Strategy, StrategyEvent, Workspace
from feedback.strategies.demo import reviewers_pick, run_demo_loop

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


def test_the_trial_takes_the_reviewers_pick_and_runs_the_tasks_it_applies_to(settings):
    # On a real model a run costs half a minute: every trial run must count for a trial.
    settings.STRATEGY_TRIAL_MIN_SAMPLES = 8
    figures = run_demo_loop(
        tasks_per_phase=40, seed=7, auto_approve=True, trial_strategies=1, trial_batch=20, trial_limit=40,
        out=lambda line: None,
    )  # fmt: skip
    proposed = Strategy.objects.filter(status="proposed")
    trialled = Strategy.objects.exclude(status="proposed").get()
    assert proposed.exists()  # the others wait for a reviewer
    assert reviewers_pick(list(Strategy.objects.order_by("pk")))[0] == trialled
    in_trial = AppliedStrategy.objects.filter(strategy_version__strategy=trialled).exclude(arm="active")
    assert figures["trial"]["runs"] == in_trial.values("run").distinct().count() > 0


def test_a_reviewer_picks_what_a_guardrail_would_have_fixed_before_what_is_better_supported(settings, tmp_path):
    from feedback.models import Run, Step, StrategyVersion, Task

    settings.WORKSPACES_ROOT = tmp_path
    workspace = Workspace.objects.create(name="w")
    workspace.path.mkdir()
    (workspace.path / "report.txt").write_text("Words.")
    runs = []
    for i in range(4):
        text = f"Count the words in report.txt ({i})"
        task = Task.objects.create(text=text, kind="file_analysis", workspace=workspace)
        run = Run.objects.create(task=task, task_kind="file_analysis", status="succeeded", score=0.1)
        Step.objects.create(
            run=run, index=0, kind="tool_call", tool_name="analyze_text", arguments={"text": "report.txt"},
            success=False, error="'report.txt' is the name of a file", error_class="ToolError",
        )  # fmt: skip
        runs.append(run)
    moves = {"type": "parameter_rule", "tool": "analyze_text", "param": "text", "action": "file_name_as_path"}
    picks = []
    for support, guardrails in ((9, []), (4, [moves])):
        strategy = Strategy.objects.create(title=f"s{support}", pattern_key=f"x{support}", support=support)
        strategy.current_version = StrategyVersion.objects.create(
            strategy=strategy, number=1, new_guidance="g", guardrails=guardrails,
            condition={"task_kinds": ["file_analysis"]},
        )  # fmt: skip
        strategy.save()
        strategy.evidence.set(runs)
        picks.append(strategy)
    assert reviewers_pick(picks) == [picks[1], picks[0]]
