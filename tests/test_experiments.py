"""Paired experiments end to end on the offline model: runs executed, evaluated, paired and
decided by the product's own code (feedback/experiments/)."""

import pytest
from django.core.exceptions import ValidationError

from feedback.datasets.services import dataset_version_create
from feedback.experiments.inline import experiment_run_here
from feedback.experiments.services import experiment_start, experiment_stop
from feedback.models import AppliedStrategy, Dataset, Experiment, Run, Strategy, StrategyVersion
from feedback.strategies.services import strategy_approve
from feedback.strategies.verdicts import promotion_verdict

pytestmark = pytest.mark.django_db

NOTES = "Release 2.1\n\n" + "Fixed the login page and the export. " * 5


def _dataset(user, items, name="set"):
    return dataset_version_create(dataset=Dataset.objects.create(name=name), user=user, items=items)


def _sums(n: int) -> list[dict]:
    return [
        {"kind": "arithmetic", "text": f"What is ({a} + 7) * 3?", "expected": (a + 7) * 3, "checker": "numeric"}
        for a in range(10, 10 + n)
    ]


def _nested_files(n: int) -> list[dict]:
    # The file sits in a sub-folder the task does not name: the offline model looks in the root.
    words = len(NOTES.split())
    return [
        {
            "kind": "file_analysis",
            "text": f"Count the words in release-{i}.txt",
            "files": [{"name": f"docs/release-{i}.txt", "content": NOTES}],
            "expected": rf"\b{words} words",
            "checker": "regex",
        }
        for i in range(n)
    ]


RESOLVE = [{"type": "parameter_rule", "tool": "read_text_file", "param": "path", "action": "resolve_in_workspace"}]


def test_a_change_that_fixes_items_is_decided_promote_with_its_pairs_and_arms(make_reviewer, sent_tasks):
    reviewer = make_reviewer("rev")
    version = _dataset(reviewer, _nested_files(14))
    experiment = experiment_start(
        user=reviewer, dataset_version=version, change_kind="guardrails", change={"guardrails": RESOLVE}, seed=1
    )
    assert experiment.pairs.count() == 14
    done = experiment_run_here(experiment.pk, timeout=300)
    assert done.status == Experiment.Status.FINISHED and done.decision == Experiment.Decision.PROMOTE
    # Seven wins and no loss pass the sign test's bar (2/0.05 = 40 < 1.8^7): decided before the end.
    assert done.verdict["wins"] >= 7 and done.verdict["losses"] == 0
    assert done.verdict["pairs"] < 14
    arms = done.verdict["arms"]
    assert arms["treatment"]["passed"] > arms["control"]["passed"] == 0
    runs = Run.objects.filter(dataset_item__version=version)
    assert set(runs.values_list("purpose", flat=True)) == {Run.Purpose.EXPERIMENT}
    # What was still under way when it was decided was stopped, not left to run.
    assert not runs.filter(status__in=Run.ACTIVE_STATUSES).exists()


def test_a_breaking_change_is_rejected(make_reviewer, sent_tasks):
    reviewer = make_reviewer("rev")
    version = _dataset(reviewer, _sums(12))
    broken = [{"type": "tool_disabled", "tool": "calculator"}]
    experiment = experiment_start(
        user=reviewer, dataset_version=version, change_kind="guardrails", change={"guardrails": broken}, seed=2
    )
    done = experiment_run_here(experiment.pk, timeout=300)
    assert done.decision == Experiment.Decision.REJECT
    assert done.verdict["losses"] >= 7 and done.verdict["wins"] == 0


def test_a_strategy_goes_proposed_experiment_trial_with_its_verdict_frozen(make_reviewer, sent_tasks):
    reviewer = make_reviewer("rev")
    strategy = Strategy.objects.create(title="Find files in sub-folders", pattern_kind="manual")
    strategy.current_version = StrategyVersion.objects.create(
        strategy=strategy, number=1, pattern="file not found", new_guidance="Look in sub-folders.", guardrails=RESOLVE
    )
    strategy.save()
    version = _dataset(reviewer, _nested_files(10))
    experiment = experiment_start(user=reviewer, dataset_version=version, change_kind="strategy", strategy=strategy)
    strategy.refresh_from_db()
    assert strategy.status == Strategy.Status.EXPERIMENT
    assert promotion_verdict(strategy).recommendation == "collect_more"
    with pytest.raises(ValidationError, match="still running"):
        strategy_approve(strategy=strategy, reviewer=reviewer, reason="too early")
    experiment_run_here(experiment.pk, timeout=300)
    verdict = promotion_verdict(strategy)
    assert (verdict.source, verdict.recommendation) == ("experiment", "promote")
    # Both arms recorded the strategy: applied in treatment, withheld in control.
    arms = set(AppliedStrategy.objects.filter(run__dataset_item__version=version).values_list("arm", flat=True))
    assert arms == {AppliedStrategy.Arm.TREATMENT, AppliedStrategy.Arm.CONTROL}
    trial = strategy_approve(strategy=strategy, reviewer=reviewer, reason="the experiment says promote")
    assert trial.status == Strategy.Status.TRIAL
    approval = trial.events.get(action="approve")
    assert approval.snapshot["experiment"]["decision"] == "promote"
    assert approval.snapshot["experiment"]["wins"] >= 7
    # Experiment runs never enter the trial: it counts production runs only.
    from feedback.strategies.trials import trial_stats

    assert trial_stats(trial).treatment.n == 0


def test_stopping_freezes_the_figures_and_returns_the_strategy_to_proposed(make_reviewer, sent_tasks):
    reviewer = make_reviewer("rev")
    strategy = Strategy.objects.create(title="S", pattern_kind="manual")
    strategy.current_version = StrategyVersion.objects.create(
        strategy=strategy, number=1, pattern="p", new_guidance="g"
    )
    strategy.save()
    experiment = experiment_start(
        user=reviewer, dataset_version=_dataset(reviewer, _sums(4)), change_kind="strategy", strategy=strategy
    )
    stopped = experiment_stop(experiment=experiment, user=reviewer)
    assert (stopped.status, stopped.decision) == (Experiment.Status.STOPPED, Experiment.Decision.UNDECIDED)
    strategy.refresh_from_db()
    assert strategy.status == Strategy.Status.PROPOSED
    assert not Run.objects.filter(purpose=Run.Purpose.EXPERIMENT, status__in=Run.ACTIVE_STATUSES).exists()
    with pytest.raises(ValidationError, match="already ended"):
        experiment_stop(experiment=stopped, user=reviewer)


def test_an_experiment_run_waits_while_people_s_runs_wait_for_a_worker(
    make_reviewer, sent_tasks, django_capture_on_commit_callbacks
):
    from feedback import queue
    from feedback.models import Task
    from feedback.tasks import run_execute_task

    reviewer = make_reviewer("rev")
    experiment = experiment_start(
        user=reviewer, dataset_version=_dataset(reviewer, _sums(1)), change_kind="guidance", change={"guidance": "g"}
    )
    mine = experiment.pairs.get().control_run
    task = Task.objects.create(text="What is 2 + 2?", kind="arithmetic", created_by=reviewer)
    waiting = Run.objects.create(task=task, task_kind="arithmetic")
    sent_tasks.clear()
    with django_capture_on_commit_callbacks(execute=True):
        run_execute_task(mine.pk)
    mine.refresh_from_db()
    assert mine.status == Run.Status.QUEUED and (queue.RUN_EXECUTE, (mine.pk,), {}) in sent_tasks
    Run.objects.filter(pk=waiting.pk).update(status=Run.Status.RUNNING)
    run_execute_task(mine.pk)
    mine.refresh_from_db()
    assert mine.status == Run.Status.SUCCEEDED


def test_experiment_runs_enter_neither_the_metrics_nor_mining(make_reviewer, sent_tasks):
    from datetime import timedelta

    from django.utils import timezone

    from feedback import metrics
    from feedback.strategies.proposals import mine_and_propose

    reviewer = make_reviewer("rev")
    broken = [{"type": "tool_disabled", "tool": "calculator"}]
    experiment = experiment_start(
        user=reviewer, dataset_version=_dataset(reviewer, _sums(12)), change_kind="guardrails",
        change={"guardrails": broken},
    )  # fmt: skip
    experiment_run_here(experiment.pk, timeout=300)
    failing = Run.objects.filter(purpose=Run.Purpose.EXPERIMENT, experiment_treatment__isnull=False)
    assert failing.filter(steps__success=False).exists()  # the failures mining would have seen
    assert mine_and_propose(window_days=None) == [] and not Strategy.objects.exists()
    window = metrics.Window(since=timezone.now() - timedelta(days=1), until=timezone.now() + timedelta(minutes=1))
    assert metrics.score_summary(window)["runs"] in (0, None)
