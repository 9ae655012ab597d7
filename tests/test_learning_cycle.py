"""The learning cycle (issue 25.2, feedback/strategies/cycle.py) end to end through the product's
services: on the offline model with small limits, and on a local OpenAI-compatible endpoint whose
model follows (or is misled by) the lessons in its prompt, so both ends of the experiment's
verdict are reached."""

import json
import re
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from feedback import metrics
from feedback.datasets.checkers import checker_verdict
from feedback.metrics.window import Window
from feedback.models import DatasetVersion, Experiment, Run, Strategy, StrategyEvent
from feedback.strategies.cycle import cycle_reviewer, run_cycle
from feedback.strategies.cycle_report import markdown

from .fake_openai import FakeOpenAI, call, completion

pytestmark = pytest.mark.django_db
STAGES = ["baseline", "mining", "pick", "experiment", "promotion", "after", "done"]


def _apart(**filters):
    """Held-out runs measured apart: experiment runs in no experiment's pair."""
    return Run.objects.filter(
        purpose=Run.Purpose.EXPERIMENT, experiment_control__isnull=True, experiment_treatment__isnull=True, **filters
    )


def _counted(runs) -> tuple[int, int]:
    """(runs, strict correct by the item's checker), counted here from the rows."""
    runs = list(runs.select_related("dataset_item"))
    return len(runs), sum(1 for run in runs if (v := checker_verdict(run)) is not None and v.passed)


def _assert_figures_are_the_rows(report: dict) -> None:
    first_experiment = Experiment.objects.order_by("created_at").first()
    last_end = Experiment.objects.order_by("-finished_at").first().finished_at
    for family in report["families"]:
        phases = {
            "baseline": Run.objects.filter(purpose=Run.Purpose.PRODUCTION, task_kind=family),
            "before": _apart(task_kind=family, created_at__lt=first_experiment.created_at),
            "after": _apart(task_kind=family, created_at__gt=last_end),
        }
        for phase, runs in phases.items():
            figures = report["figures"][phase][family]
            n, correct = _counted(runs)
            assert (figures["runs"], figures["strict_correct"]) == (n, correct), (phase, family)
            assert figures["strict_correct_rate"] == pytest.approx(correct / n)
    # Held-out items only, before and after; the mining split only in the baseline.
    assert not _apart(dataset_item__split="mining").exists()
    assert not Run.objects.filter(purpose=Run.Purpose.PRODUCTION, dataset_item__split="held_out").exists()


def _assert_experiment_runs_stay_out_of_production_metrics(report: dict, since) -> None:
    window = Window(since=since, until=timezone.now() + timedelta(seconds=1))
    baseline = sum(len(ids) for ids in report["runs"]["baseline"].values())
    assert Run.objects.filter(purpose=Run.Purpose.EXPERIMENT).count() > 0
    assert metrics.repeated_error_summary(window)["runs"] == baseline == Window.runs(window).count()


def test_the_cycle_on_the_offline_model_runs_its_stages_in_order_and_reports_its_rows(settings, tmp_path):
    settings.STRATEGY_MIN_SUPPORT = 3
    since = timezone.now()
    lines: list[str] = []
    reviewer = cycle_reviewer("cycle-reviewer")
    report = run_cycle(mining_limit=4, held_out_limit=4, reviewer=reviewer, out=lines.append)

    assert [row["stage"] for row in report["stages"]] == STAGES
    printed = [line.split(":")[1].strip() for line in lines if line.startswith("Stage ")]
    assert printed == STAGES
    # One progress line per run: 4 mining + 4 held-out before + 4 after per family, and each experiment run.
    experiment_runs = (
        Run.objects.exclude(experiment_control=None).count() + Run.objects.exclude(experiment_treatment=None).count()
    )
    assert sum(1 for line in lines if re.match(r"\s+\[.*\] run #\d+", line)) == 3 * 12 + experiment_runs
    assert report["picked"], "mining on the offline model's failures proposes something to test"
    for row in report["picked"]:
        experiment = Experiment.objects.get(pk=row["experiment"])
        # Decided by the sequential test, recorded on the Experiment, on the held-out items only.
        assert experiment.status == Experiment.Status.FINISHED and experiment.decision == row["decision"]
        assert experiment.verdict["pairs"] == row["pairs"] and experiment.created_by == reviewer
        assert set(experiment.pairs.values_list("item__split", flat=True)) == {"held_out"}
        strategy = Strategy.objects.get(pk=row["strategy"])
        promoted = strategy.events.filter(action=StrategyEvent.Action.PROMOTE)
        # The offline model ignores guidance: nothing here says promote, so nothing is promoted.
        assert row["decision"] != "promote" and row["end"] in ("not_promoted", "rejected")
        assert strategy.status != Strategy.Status.ACTIVE and not promoted.exists()
    assert not StrategyEvent.objects.filter(action=StrategyEvent.Action.PROMOTE_OVERRIDE).exists()
    _assert_figures_are_the_rows(report)
    _assert_experiment_runs_stay_out_of_production_metrics(report, since)
    assert "| overall | held-out, after |" in markdown(report)


def test_without_a_reviewer_it_stops_at_the_proposals(settings):
    settings.STRATEGY_MIN_SUPPORT = 3
    report = run_cycle(families=["email_triage"], mining_limit=4, held_out_limit=2, out=lambda line: None)
    assert [row["stage"] for row in report["stages"]] == ["baseline", "mining", "stopped"]
    assert report["proposed"] and not Experiment.objects.exists()
    assert not Strategy.objects.exclude(status=Strategy.Status.PROPOSED).exists()


def test_a_rerun_stops_what_an_interrupted_cycle_left_running_and_one_cycle_runs_at_a_time(settings):
    from django.core.exceptions import ValidationError

    from feedback import locks
    from feedback.experiments.services import experiment_start

    settings.STRATEGY_MIN_SUPPORT = 3
    reviewer = cycle_reviewer("cycle-reviewer")
    first = run_cycle(families=["email_triage"], mining_limit=4, held_out_limit=2, out=lambda line: None)
    # A cycle killed in its experiment stage: its experiment left running, its strategy in it.
    strategy = Strategy.objects.get(pk=first["proposed"][0]["strategy"])
    version = DatasetVersion.objects.get(dataset__name="Workload: support-email triage")
    left = experiment_start(
        user=reviewer, dataset_version=version, change_kind="strategy", strategy=strategy, split="held_out", limit=2
    )
    lock = locks.job_lock_acquire(name=locks.LEARNING_CYCLE, seconds=60)
    with pytest.raises(ValidationError, match="A learning cycle is running"):
        run_cycle(families=["email_triage"], mining_limit=4, held_out_limit=2, reviewer=reviewer, out=print)
    locks.job_lock_release(name=locks.LEARNING_CYCLE, token=lock.token)

    second = run_cycle(families=["email_triage"], mining_limit=4, held_out_limit=2, reviewer=reviewer, out=print)
    assert second["stopped_experiments"] == [left.pk]
    left.refresh_from_db()
    assert left.status == Experiment.Status.STOPPED and not Experiment.objects.filter(status="running").exists()
    assert [row["stage"] for row in second["stages"]] == STAGES and locks.job_lock_held(locks.LEARNING_CYCLE) is None
    # The first cycle's runs are still the first cycle's: the second added its own.
    assert set(first["runs"]["baseline"]["email_triage"]).isdisjoint(second["runs"]["baseline"]["email_triage"])


# --- a model that reads its prompt -------------------------------------------------------------------
_DIGITS = re.compile(r"(?:What is|Compute) ([\d+\-*/%(). ]+?)[?.]$")


def _expression(task: str) -> str | None:
    found = _DIGITS.search(re.sub(r"(\d+)% of (\d+)", r"\1 / 100 * \2", task.strip()))
    return found.group(1).strip() if found else None


_LESSON_HEADINGS = ("Lessons from earlier runs", "Insights from comparing failed and successful runs")


def _picks(report: dict) -> tuple[list[dict], list[dict]]:
    """The picked proposals, and the picked insight lists (each measured by its own experiment)."""
    lists = [row for row in report["picked"] if row["pattern_kind"] == Strategy.PatternKind.INSIGHTS]
    return [row for row in report["picked"] if row not in lists], lists


def _model(*, lessons_help: bool):
    """A stand-in for a small model: it works out sums written in digits, and either calls the
    calculator or answers with the expression unevaluated (as the local model did, issue 25),
    depending on whether lessons are in its system prompt; sums in words it gives up on."""

    def reply(body: dict) -> dict:
        messages = body["messages"]
        # Any lesson counts: a proposal's guidance or an insight list, each under its own heading.
        taught = any(heading in messages[0]["content"] for heading in _LESSON_HEADINGS)
        expression = _expression(messages[1]["content"])
        if expression is None:
            return completion("I could not work this out.")
        if taught != lessons_help:
            return completion(expression)
        results = [m for m in messages if m["role"] == "tool"]
        if not results:
            return completion(tool_calls=[call("calculator", {"expression": expression})])
        return completion(f"The result is {json.loads(results[-1]['content'])['result']['value']}.")

    return reply


@pytest.fixture
def small_model(settings):
    with FakeOpenAI() as server:
        settings.LLM_BACKEND, settings.OPENAI_BASE_URL, settings.OPENAI_API_KEY = "openai", server.base_url, "k"
        settings.LLM_MODEL, settings.LLM_TIMEOUT_SECONDS, settings.LLM_MAX_ATTEMPTS = "small-test-model", 5, 1
        # As the local model runs (the Makefile's LOCAL_LLM_ENV): no judge model, template proposals.
        settings.LLM_JUDGE_BACKEND, settings.STRATEGY_PROPOSAL_WRITER = "offline", "template"
        settings.LLM_EMBEDDING_MODEL, settings.STRATEGY_MIN_SUPPORT = "", 3
        yield server


def test_a_strategy_that_helps_on_the_held_out_items_is_promoted_on_its_verdict(small_model):
    small_model.responder = _model(lessons_help=True)
    reviewer = cycle_reviewer("cycle-reviewer")
    report = run_cycle(families=["arithmetic"], mining_limit=6, held_out_limit=24, reviewer=reviewer, out=print)

    # No baseline run succeeded (untaught, the model leaves every sum unevaluated): no pair, no list.
    [row], [] = _picks(report)
    experiment = Experiment.objects.get(pk=row["experiment"])
    assert experiment.decision == "promote" == row["decision"] and row["losses"] == 0 and row["wins"] >= 7
    assert row["low"] is not None and row["low"] > 0  # its always-valid interval, above zero
    strategy = Strategy.objects.get(pk=row["strategy"])
    assert (strategy.status, row["end"], strategy.promoted_by_override) == (Strategy.Status.ACTIVE, "promoted", False)
    promotion = strategy.events.get(action=StrategyEvent.Action.PROMOTE)
    assert promotion.actor == reviewer and promotion.snapshot["verdict"]["source"] == "experiment"
    assert promotion.snapshot["experiment"]["experiment"] == experiment.pk
    # Promoted only after its experiment ended, through approval (the lifecycle's order).
    actions = list(strategy.events.order_by("created_at", "pk").values_list("action", flat=True))
    assert actions[-4:] == ["experiment", "experiment_end", "approve", "promote"]
    before, after = report["figures"]["before"]["arithmetic"], report["figures"]["after"]["arithmetic"]
    assert before["strict_correct"] == 0 and after["strict_correct"] == 12  # the 12 sums in digits of 24
    assert before["models"] == after["models"] == ["small-test-model"]
    _assert_figures_are_the_rows(report)


def test_a_strategy_that_harms_is_rejected_and_never_promoted(small_model):
    small_model.responder = _model(lessons_help=False)
    reviewer = cycle_reviewer("cycle-reviewer")
    report = run_cycle(families=["arithmetic"], mining_limit=12, held_out_limit=24, reviewer=reviewer, out=print)

    # The sums in digits succeeded and those in words failed: pairs, so an insight list, picked too.
    [row], [insights] = _picks(report)
    assert (row["decision"], row["end"], row["wins"]) == ("reject", "rejected", 0)
    assert (insights["decision"], insights["end"], insights["wins"]) == ("reject", "rejected", 0)
    assert Experiment.objects.get(pk=insights["experiment"]).strategy_version.insights
    strategy = Strategy.objects.get(pk=row["strategy"])
    assert strategy.status == Strategy.Status.REJECTED
    assert not strategy.events.filter(action__in=["promote", "promote_override", "approve"]).exists()
    before, after = report["figures"]["before"]["arithmetic"], report["figures"]["after"]["arithmetic"]
    assert before["strict_correct"] == after["strict_correct"] == 12  # nothing went live


def test_no_picks_measures_the_familys_insight_list_alone(small_model):
    small_model.responder = _model(lessons_help=False)
    report = run_cycle(
        families=["arithmetic"], mining_limit=12, held_out_limit=24, reviewer=cycle_reviewer("r"), picks=0, out=print
    )

    # A proposal was mined (the sums in words), but none is picked: only the list is measured.
    assert Strategy.objects.exclude(pattern_kind=Strategy.PatternKind.INSIGHTS).exists()
    [], [insights] = _picks(report)
    assert Experiment.objects.get().pk == insights["experiment"]
    assert (insights["decision"], insights["end"]) == ("reject", "rejected")


def test_without_insight_lists_only_the_picked_proposal_is_measured(small_model):
    small_model.responder = _model(lessons_help=False)
    report = run_cycle(
        families=["arithmetic"],
        mining_limit=12,
        held_out_limit=24,
        reviewer=cycle_reviewer("r"),
        insight_lists=False,
        out=print,
    )

    assert Strategy.objects.filter(pattern_kind=Strategy.PatternKind.INSIGHTS).exists()  # proposed, not picked
    [row], [] = _picks(report)
    assert Experiment.objects.get().pk == row["experiment"] and report["options"]["insight_lists"] is False


def test_the_command_refuses_a_negative_number_of_picks():
    with pytest.raises(CommandError, match="--picks must be at least 0"):
        call_command("learning_cycle", "--picks", "-1")


def test_a_sensitive_call_is_refused_by_the_cycles_reviewer_and_the_run_goes_on(small_model):
    # The local model e-mailed its arithmetic (send_reply, which waits for a person's confirmation):
    # the cycle runs unattended, so its reviewer refuses the call and the run ends without it.
    from feedback.experiments.inline import UNATTENDED
    from feedback.models import ToolConfirmation

    def reply(body: dict) -> dict:
        told = [m for m in body["messages"] if m["role"] == "tool"]
        if not told:
            return completion(tool_calls=[call("send_reply", {"to": "a@example.com", "subject": "Sum", "body": "42"})])
        return completion("42")

    small_model.responder = reply
    reviewer = cycle_reviewer("cycle-reviewer")
    report = run_cycle(families=["arithmetic"], mining_limit=2, held_out_limit=2, reviewer=reviewer, out=print)

    confirmations = ToolConfirmation.objects.all()
    # One per run of the cycle: the baseline, the held-out runs before and after, any experiment's.
    assert len(report["runs"]["baseline"]["arithmetic"]) == 2 and confirmations.count() == Run.objects.count() >= 6
    assert set(confirmations.values_list("status", "decided_by", "reason")) == {
        (ToolConfirmation.Status.REJECTED, reviewer.pk, UNATTENDED)
    }
    assert not Run.objects.filter(status__in=Run.ACTIVE_STATUSES).exists()
    assert set(Run.objects.values_list("status", "final_output")) == {(Run.Status.SUCCEEDED, "42")}


def _misled_but_guarded(body: dict) -> dict:
    """A model that works out the sums it is asked as "What is (...", and leaves the others
    unevaluated until a guardrail refuses that answer; lessons in its prompt mislead it into
    leaving every sum unevaluated, refused or not. So a strategy's guidance harms and its
    guardrail helps: the cycle must measure them apart and keep the guardrail alone."""
    messages = body["messages"]
    taught = any(heading in messages[0]["content"] for heading in _LESSON_HEADINGS)
    expression = _expression(messages[1]["content"])
    if expression is None:
        return completion("I could not work this out.")
    results = [m for m in messages if m["role"] == "tool"]
    if results:
        return completion(f"The result is {json.loads(results[-1]['content'])['result']['value']}.")
    refused = any("Guardrail:" in str(m.get("content")) for m in messages[2:] if m["role"] != "assistant")
    if not taught and (refused or messages[1]["content"].startswith("What is (")):
        return completion(tool_calls=[call("calculator", {"expression": expression})])
    return completion(expression)


def test_a_pick_whose_guardrail_alone_helps_is_revised_to_it_and_that_version_promoted(small_model):
    small_model.responder = _misled_but_guarded
    reviewer = cycle_reviewer("cycle-reviewer")
    report = run_cycle(
        families=["arithmetic"], mining_limit=24, held_out_limit=24, reviewer=reviewer, kinds=["guardrails"], out=print
    )

    whole, revised = [row for row in report["picked"] if row["pattern_kind"] != Strategy.PatternKind.INSIGHTS]
    [guardrails] = report["kind_experiments"]
    assert whole["decision"] != "promote" and whole["end"] == "revised"
    assert (guardrails["kind"], guardrails["decision"], guardrails["losses"]) == ("guardrails", "promote", 0)
    assert (revised["strategy"], revised["revised_from"], revised["alone"]) == (
        whole["strategy"],
        whole["experiment"],
        "guardrails",
    )
    assert (revised["decision"], revised["end"], revised["guidance"]) == ("promote", "promoted", False)
    # The promoted version is the one its own experiment tested: the guardrail alone, no guidance.
    experiment = Experiment.objects.get(pk=revised["experiment"])
    strategy = Strategy.objects.get(pk=whole["strategy"])
    assert strategy.status == Strategy.Status.ACTIVE and experiment.strategy_version == strategy.current_version
    version = strategy.current_version
    assert version.number == 2 and version.new_guidance == "" and version.guardrails
    assert version.guardrails == strategy.versions.get(number=1).guardrails
    promotion = strategy.events.get(action=StrategyEvent.Action.PROMOTE)
    assert promotion.snapshot["experiment"]["experiment"] == experiment.pk and promotion.actor == reviewer
    actions = list(strategy.events.order_by("created_at", "pk").values_list("action", flat=True))
    assert actions[-7:] == [
        "experiment",
        "experiment_end",
        "edit",
        "experiment",
        "experiment_end",
        "approve",
        "promote",
    ]
    before, after = report["figures"]["before"]["arithmetic"], report["figures"]["after"]["arithmetic"]
    assert after["strict_correct"] > before["strict_correct"]
    assert "the pick was revised to it" in markdown(report)
    _assert_figures_are_the_rows(report)
