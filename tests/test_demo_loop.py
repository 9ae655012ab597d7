"""`make demo-loop`, small: the loop must measurably stop repeating the demo's mistakes."""

import pytest

from feedback.models import Strategy, StrategyEvent, Workspace
from feedback.strategies.demo import reviewers_pick, run_demo_loop

pytestmark = pytest.mark.django_db


def test_the_loop_lowers_repeated_errors_and_raises_the_score(settings):
    settings.STRATEGY_TRIAL_MIN_SAMPLES = 8
    lines: list[str] = []
    report = run_demo_loop(tasks_per_phase=90, seed=7, auto_approve=True, out=lines.append)
    before, after = report["figures"]["before"], report["figures"]["after"]
    assert after["repeated errors per run"] < before["repeated errors per run"]
    assert after["average score"] > before["average score"]
    promoted = Strategy.objects.get(status="active")
    assert promoted.current_version.guardrails[0]["action"] == "resolve_in_workspace"
    assert StrategyEvent.objects.filter(action="promote", actor__username="demo-loop").count() == 1
    # Everything else that was trialled ended as its test said (rolled back: no effect, or harm) or is
    # reported undecided and left on trial; the report says which.
    ends = {row["strategy"]: row["end"] for row in report["decisions"]}
    assert ends[promoted.pk] == "promoted"
    allowed = {("rolled_back", "rolled_back"), ("rolled_back", "auto_rolled_back"), ("trial", "undecided")}
    for strategy in Strategy.objects.exclude(pk=promoted.pk):
        assert (strategy.status, ends[strategy.pk]) in allowed
    assert any(line.startswith("repeated errors per run") for line in "\n".join(lines).splitlines())


def test_without_auto_approve_it_stops_at_the_proposals():
    report = run_demo_loop(tasks_per_phase=40, seed=7, out=lambda line: None)
    assert set(report["figures"]) == {"before"} and report["proposed"] and not report["decisions"]
    assert not Strategy.objects.exclude(status="proposed").exists()


def test_the_trial_takes_the_reviewers_pick_and_runs_the_tasks_it_applies_to(settings):
    # On a real model a run costs half a minute: every trial run must count for a trial.
    settings.STRATEGY_TRIAL_MIN_SAMPLES = 8
    report = run_demo_loop(
        tasks_per_phase=40, seed=7, auto_approve=True, trial_strategies=1, trial_batch=20, trial_limit=40,
        out=lambda line: None,
    )  # fmt: skip
    proposed = Strategy.objects.filter(status="proposed")
    trialled = Strategy.objects.exclude(status="proposed").get()
    assert proposed.exists()  # the others wait for a reviewer
    assert reviewers_pick(list(Strategy.objects.order_by("pk")))[0] == trialled
    # Every run of the trial phase was in its trial (the phase's own record of what was live in it).
    [live] = report["phases"]["trial"]["live"]
    assert live["strategy"] == trialled.pk and live["active"] == 0
    assert report["figures"]["trial"]["runs"] == live["treatment"] + live["control"] > 0
    # Its end is its test's: undecided after its 40 runs is left on trial, not rolled back as if by a result.
    [decision] = report["decisions"]
    assert {"undecided": "trial", "promoted": "active"}.get(decision["end"], "rolled_back") == trialled.status


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
