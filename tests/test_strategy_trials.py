import pytest

from feedback.agent.loop import execute_run
from feedback.models import AppliedStrategy, Run, Step, Strategy, Task
from feedback.strategies import injection, services
from feedback.strategies.injection import trial_arm
from feedback.strategies.trials import Sample, always_valid_interval, check_trials, compare, trial_stats

from .factories import make_run
from .test_strategy_lifecycle import make_strategy


def _sample(values) -> Sample:
    sample = Sample()
    for value in values:
        sample.add(value)
    return sample


def test_the_always_valid_interval_matches_a_hand_computation():
    # Means 0.85 and 0.5; sample variances 0.05/3 and 0.02/3, so s² = 0.0058333; τ² = 0.4² x 0.023333
    # = 0.0037333; half-width² = s² (1 + s²/τ²) (2 ln 20 + ln(1 + τ²/s²)) = 0.0058333 x 2.5625 x
    # (5.99146 + 0.49470) = 0.096955 -> 0.31138 (the Welch interval's was 0.19579).
    interval = always_valid_interval(_sample([0.9, 0.8, 1.0, 0.7]), _sample([0.5, 0.6, 0.4, 0.5]))
    assert interval.difference == pytest.approx(0.35)
    assert interval.low == pytest.approx(0.35 - 0.31138, abs=1e-4)
    assert interval.high == pytest.approx(0.35 + 0.31138, abs=1e-4)
    assert always_valid_interval(_sample([0.9]), _sample([0.5, 0.6])) is None


def test_recommendations(settings):
    settings.STRATEGY_TRIAL_MIN_SAMPLES = 5
    settings.STRATEGY_TRIAL_MIN_EFFECT = 0.1
    better = compare(_sample([0.9, 0.95, 0.85, 0.9, 0.92, 0.88]), _sample([0.5, 0.55, 0.6, 0.45, 0.5, 0.52]))
    worse = compare(_sample([0.3, 0.35, 0.25, 0.3, 0.32, 0.28]), _sample([0.8, 0.85, 0.75, 0.8, 0.82, 0.78]))
    unclear = compare(_sample([0.5, 0.9, 0.1, 0.7, 0.3, 0.6]), _sample([0.6, 0.2, 0.8, 0.4, 0.5, 0.7]))
    same = compare(_sample([0.8, 0.82, 0.78] * 20), _sample([0.81, 0.79, 0.8] * 20))
    few = compare(_sample([0.9, 0.9]), _sample([0.1, 0.1, 0.2]))
    assert (better.recommendation, better.improved) == ("promote", True)
    assert (worse.recommendation, worse.harmed) == ("roll_back", True)
    assert unclear.recommendation == "collect_more" and not unclear.improved and not unclear.harmed
    assert same.recommendation == "no_effect" and -0.1 < same.ci_low < same.ci_high < 0.1
    assert few.recommendation == "collect_more" and few.ci_low is None


def test_arms_are_deterministic_and_near_the_fraction():
    arms = [trial_arm(7, run_id, 0.3) for run_id in range(2000)]
    assert arms == [trial_arm(7, run_id, 0.3) for run_id in range(2000)]
    assert 0.27 < arms.count("treatment") / 2000 < 0.33


def _trial_with(scores_t, scores_c):
    s = make_strategy(status="trial")
    for arm, scores in (("treatment", scores_t), ("control", scores_c)):
        for score in scores:
            run = make_run(status=Run.Status.SUCCEEDED, score=score)
            AppliedStrategy.objects.create(run=run, strategy_version=s.current_version, arm=arm)
    return s


@pytest.mark.django_db
def test_a_planted_improvement_is_recommended_for_promotion(settings):
    settings.STRATEGY_TRIAL_MIN_SAMPLES = 10
    s = _trial_with([0.9, 0.85, 0.95] * 4, [0.5, 0.6, 0.55] * 4)
    stats = trial_stats(s)
    assert (stats.treatment.n, stats.control.n) == (12, 12)
    assert stats.treatment.mean == pytest.approx(0.9) and stats.control.mean == pytest.approx(0.55)
    assert stats.recommendation == "promote"
    assert check_trials() == []
    s.refresh_from_db()
    assert s.status == "trial"  # promotion waits for a reviewer


@pytest.mark.django_db
def test_a_planted_harm_is_rolled_back_automatically(settings):
    settings.STRATEGY_TRIAL_MIN_SAMPLES = 10
    s = _trial_with([0.3, 0.4, 0.35] * 4, [0.8, 0.9, 0.85] * 4)
    assert check_trials() == [s.pk]
    s.refresh_from_db()
    assert s.status == "rolled_back"
    event = s.events.get()
    assert event.action == "auto_roll_back" and event.actor is None
    assert event.reason.startswith("Automatic roll-back: treatment scores -0.500 against control")
    assert event.snapshot["trial"]["harmed"] is True


@pytest.mark.django_db
def test_the_error_rate_counts_failed_calls_and_runs_but_not_guardrail_refusals(settings):
    settings.STRATEGY_TRIAL_MIN_SAMPLES = 2
    s = make_strategy(status="trial")
    outcomes = [("succeeded", ""), ("succeeded", "ToolError"), ("succeeded", "GuardrailRefused"), ("failed", ""),
                ("running", "ToolError")]  # fmt: skip
    for status, error_class in outcomes:
        run = make_run(status=status, score=0.8 if status == "succeeded" else None)
        if error_class:
            Step.objects.create(run=run, index=0, kind="tool_call", tool_name="read_text_file", success=False,
                                error="refused", error_class=error_class)  # fmt: skip
        AppliedStrategy.objects.create(run=run, strategy_version=s.current_version, arm="treatment")
    stats = trial_stats(s)
    error_rate = next(g for g in stats.guards if g.name == "error_rate")
    # Four finished runs (the running one is not yet counted): a failed call, a failed run.
    assert (error_rate.treatment.n, error_rate.treatment.mean) == (4, 0.5)
    assert (stats.treatment.n, stats.split.treatment) == (3, 5)  # scored runs; runs assigned


@pytest.mark.django_db
class TestInjection:
    def _active(self, **version):
        s = make_strategy(status="active")
        for field, value in version.items():
            setattr(s.current_version, field, value)
        s.current_version.save()
        return s

    def test_a_matching_run_gets_the_guidance_and_the_guardrail(self, demo_workspace):
        s = self._active(guardrails=[{"type": "parameter_rule", "tool": "read_text_file", "param": "path",
                                      "action": "resolve_in_workspace"}])  # fmt: skip
        run = make_run(text="Summarise release-notes.txt", kind=Task.Kind.FILE_ANALYSIS, workspace=demo_workspace)
        execute_run(run.pk)
        run.refresh_from_db()
        assert "Lessons from earlier runs (follow them):\n- Use exact paths." in run.system_prompt
        applied = run.applied_strategies.get()
        assert (applied.strategy_version, applied.arm) == (s.current_version, "active")
        read = run.steps.get(tool_name="read_text_file")
        assert read.success and read.arguments == {"path": "docs/release-notes.txt"}
        assert "resolved to 'docs/release-notes.txt'" in read.thought
        assert "It has" in run.final_output

    def test_a_non_matching_run_gets_neither(self, demo_workspace):
        self._active(guardrails=[{"type": "tool_disabled", "tool": "calculator"}])
        run = make_run(text="What is 2 + 3?", kind=Task.Kind.ARITHMETIC)
        execute_run(run.pk)
        run.refresh_from_db()
        assert "Lessons from earlier runs" not in run.system_prompt
        assert not run.applied_strategies.exists()
        assert run.steps.get(tool_name="calculator").success

    def test_the_control_arm_is_recorded_but_not_applied(self, demo_workspace):
        s = make_strategy(status="trial", trial_fraction=0.5)
        arms = {}
        for _ in range(12):
            run = make_run(text="Summarise report.txt", kind=Task.Kind.FILE_ANALYSIS, workspace=demo_workspace)
            execute_run(run.pk)
            run.refresh_from_db()
            arm = run.applied_strategies.get(strategy_version__strategy=s).arm
            arms.setdefault(arm, []).append("Use exact paths." in run.system_prompt)
        assert set(arms) == {"treatment", "control"}
        assert all(arms["treatment"]) and not any(arms["control"])

    def test_a_disabled_tool_and_a_precondition_are_enforced(self, demo_workspace):
        self._active(guardrails=[{"type": "tool_precondition", "tool": "read_text_file", "requires": "list_directory"}])
        run = make_run(text="Summarise report.txt", kind=Task.Kind.FILE_ANALYSIS, workspace=demo_workspace)
        execute_run(run.pk)
        run.refresh_from_db()
        first_read = run.steps.filter(tool_name="read_text_file").order_by("index").first()
        assert first_read.success is False and first_read.error_class == "GuardrailRefused"
        assert "call list_directory successfully before read_text_file" in first_read.error
        assert run.steps.filter(tool_name="read_text_file", success=True).exists()  # after listing
        assert Strategy.objects.count() == 1


@pytest.mark.django_db
def test_the_effectiveness_ratio_counts_finished_trials(reviewer, client, settings):
    from feedback import metrics
    from feedback.strategies import services

    settings.STRATEGY_TRIAL_MIN_SAMPLES = 10
    improved = _trial_with([0.9, 0.85, 0.95] * 4, [0.5, 0.6, 0.55] * 4)
    services.strategy_promote(strategy=improved, reviewer=reviewer, reason="better")
    flat = make_strategy(status="trial")
    services.strategy_roll_back(strategy=flat, reviewer=reviewer, reason="no effect", trial={"improved": False})
    harmful = make_strategy(status="trial")
    services.strategy_roll_back(strategy=harmful, reviewer=None, reason="harm", automatic=True,
                                trial={"improved": False, "harmed": True})  # fmt: skip
    never_trialled = make_strategy(status="active")
    services.strategy_roll_back(strategy=never_trialled, reviewer=reviewer, reason="obsolete")
    summary = metrics.strategy_effectiveness(metrics.Window.last(1))
    assert summary == {"finished": 3, "improved": 1, "ratio": pytest.approx(1 / 3)}
    client.force_login(reviewer)
    html = client.get("/metrics/").content.decode()
    assert "1 of 3 finished trials improved scores" in html


@pytest.mark.django_db
def test_runs_start_without_reading_unchanged_strategies_and_see_a_change_at_once(reviewer):
    s = make_strategy(status="active")
    runs = [make_run(text="Summarise report.txt", kind=Task.Kind.FILE_ANALYSIS) for _ in range(3)]
    assert [v.pk for v, _ in injection.select(runs[0]).applied] == [s.current_version_id]
    assert [v.pk for v, _ in injection.select(runs[1]).applied] == [s.current_version_id]
    services.strategy_roll_back(strategy=s, reviewer=reviewer, reason="no longer needed")
    assert injection.select(runs[2]).applied == []
