"""Insight lists (issue 25, point 3), written by the rules from the offline agent's own runs: a
failure/success pair of a task kind compared once, a new version per change (waiting for a
reviewer when the strategy is live), and the insights in the prompt of the kind's later runs."""

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command

from feedback.agent.loop import execute_run
from feedback.evaluation.chain import evaluate_run
from feedback.models import AppliedStrategy, InsightPair, Run, Strategy, StrategyEvent, StrategyVersion, Task, Workspace
from feedback.strategies import services
from feedback.strategies.insights import insight_pairs, insights_update, pending_version

from .factories import make_calculated_run, make_run

pytestmark = pytest.mark.django_db

CALL_CALCULATOR = "For arithmetic tasks, call calculator and use its result before answering."


def offline_run(text, *, kind=Task.Kind.ARITHMETIC, expected="", workspace=None, **fields) -> Run:
    """A run of the offline demo model through the real loop, evaluated as a worker would."""
    run = make_run(text=text, kind=kind, workspace=workspace, **fields)
    Task.objects.filter(pk=run.task_id).update(expected_answer=expected)
    execute_run(run.pk)
    evaluate_run(run.pk)
    run.refresh_from_db()
    return run


def arithmetic_pair() -> tuple[Run, Run]:
    good = offline_run("What is (17 * 23 + 4) / 5?", expected="79")
    # Words the offline model cannot read: it answers without the calculator, and is wrong.
    bad = offline_run("How much is a dozen eggs times three?", expected="36")
    assert good.outcome == Run.Outcome.ACCOMPLISHED and bad.outcome == Run.Outcome.NOT_ACCOMPLISHED
    return bad, good


def texts_and_votes(version: StrategyVersion) -> list[tuple[str, int]]:
    return [(i["text"], i["votes"]) for i in version.insights]


def test_a_first_pair_proposes_the_kind_s_insight_list():
    bad, good = arithmetic_pair()
    [strategy] = insights_update(window_days=30)
    assert (strategy.pattern_kind, strategy.status, strategy.pattern_key) == (
        "insights",
        "proposed",
        "insights:arithmetic",
    )
    assert strategy.title == "Insights for arithmetic tasks" and strategy.support == 1
    version = strategy.current_version
    assert version.number == 1 and version.condition == {"task_kinds": ["arithmetic"]}
    assert texts_and_votes(version) == [(CALL_CALCULATOR, 2)]
    version.full_clean()  # the list passes the model's own check
    pair = InsightPair.objects.get()
    assert (pair.failing_run, pair.succeeding_run, pair.strategy, pair.version) == (bad, good, strategy, version)
    assert pair.writer == "rules" and pair.operations == [{"op": "ADD", "index": 0, "text": CALL_CALCULATOR}]
    assert list(strategy.evidence.all()) == [bad]
    event = strategy.events.get()
    assert event.action == StrategyEvent.Action.PROPOSE and event.actor is None
    assert event.snapshot["insights"] == version.insights
    assert event.snapshot["pairs"][0]["operations"] == [f"ADD {CALL_CALCULATOR}"]
    assert event.snapshot["changes"] == [{"change": "added", "text": CALL_CALCULATOR, "votes": 2}]


def test_each_pair_is_compared_once_and_each_change_is_a_new_version():
    arithmetic_pair()
    [strategy] = insights_update(window_days=30)
    assert insights_update(window_days=30) == [] and insight_pairs(window_days=30) == []
    assert InsightPair.objects.count() == 1 and strategy.versions.count() == 1
    # Another failure of the kind: compared with the same success, it confirms the insight.
    again = offline_run("How much is a dozen eggs times four?", expected="48")
    [updated] = insights_update(window_days=30)
    assert updated == strategy and updated.current_version.number == 2  # a proposal: the new version is current
    assert texts_and_votes(updated.current_version) == [(CALL_CALCULATOR, 3)]
    assert texts_and_votes(strategy.versions.get(number=1)) == [(CALL_CALCULATOR, 2)]  # the old one stays
    assert InsightPair.objects.get(failing_run=again).operations == [{"op": "UPVOTE", "index": 1, "text": ""}]
    event = updated.events.latest("pk")
    assert event.action == StrategyEvent.Action.EDIT and event.version.number == 2
    assert event.reason == "Insights updated from 1 failure/success pair(s)."
    assert updated.support == 2


def test_a_file_task_s_failure_teaches_the_missing_tool_and_the_error_to_avoid(demo_workspace):
    good = offline_run(
        "Summarise report.txt and count its words", kind="file_analysis", expected="80", workspace=demo_workspace
    )
    bad = offline_run("Summarise release-notes.txt", kind="file_analysis", workspace=demo_workspace)
    assert good.outcome == Run.Outcome.ACCOMPLISHED and bad.outcome == Run.Outcome.NOT_ACCOMPLISHED
    # An older insight tells to list the folder: the failure did, the success did not need to.
    listing = "For file analysis tasks, call list_directory and use its result before answering."
    strategy = Strategy.objects.create(
        title="Insights for file analysis tasks", pattern_kind="insights", pattern_key="insights:file_analysis"
    )
    strategy.current_version = StrategyVersion.objects.create(
        strategy=strategy,
        number=1,
        pattern="p",
        new_guidance="g",
        condition={"task_kinds": ["file_analysis"]},
        insights=[{"id": "old1", "text": listing, "votes": 1}],
    )
    strategy.save()
    insights_update(window_days=30)
    version = strategy.versions.get(number=2)
    assert texts_and_votes(version) == [
        ("For file analysis tasks, call analyze_text and use its result before answering.", 2),
        (
            "For file analysis tasks, avoid read_text_file calls that fail with ToolError: check the call's arguments "
            "against the task and the workspace before making it.",
            2,
        ),
    ]  # and the listing insight, down-voted to 0, fell away
    ops = InsightPair.objects.get().operations
    assert [op["op"] for op in ops] == ["ADD", "ADD", "DOWNVOTE"]
    assert "report.txt" not in str(version.insights) and "release-notes" not in str(version.insights)
    changes = strategy.events.latest("pk").snapshot["changes"]
    assert {"change": "removed", "text": listing, "old_votes": 1} in changes


def test_only_runs_every_reader_may_see_are_compared(nobody):
    offline_run("What is (17 * 23 + 4) / 5?", expected="79")
    offline_run("How much is a dozen eggs times three?", expected="36", purpose=Run.Purpose.EXPERIMENT)
    offline_run("How much is a dozen eggs times five?", expected="60", purpose=Run.Purpose.PLAYGROUND)
    private = Workspace.objects.create(name="mine", owner=nobody)
    offline_run("How much is a dozen eggs times six?", expected="72", workspace=private)
    assert insight_pairs(window_days=30) == []
    assert insights_update(window_days=30) == [] and not Strategy.objects.exists()


def test_the_success_paired_is_the_most_similar():
    from .strategy_history import add_run

    failing = add_run(text="Count the words in notes-1.txt", score=0.2, calls=[("read_text_file", "No such file")])
    same_task = add_run(text="Count the words in notes-2.txt", calls=[("list_directory", "")])
    add_run(text="Summarise a report", calls=[("read_text_file", ""), ("analyze_text", "")])  # newer, a tool shared
    assert insight_pairs(window_days=30) == [(failing, same_task)]
    other = add_run(text="Tell me about the weather", score=0.2, calls=[("analyze_text", "")])
    sharing = add_run(text="Summarise another report", calls=[("analyze_text", "")])
    add_run(text="Say hello", calls=[("list_directory", "")])  # the newest, no tool shared
    assert insight_pairs(window_days=30)[1] == (other, sharing)


def test_a_live_strategy_s_update_waits_for_a_reviewer(reviewer):
    arithmetic_pair()
    [strategy] = insights_update(window_days=30)
    Strategy.objects.filter(pk=strategy.pk).update(status=Strategy.Status.ACTIVE)
    offline_run("How much is a dozen eggs times four?", expected="48")
    [updated] = insights_update(window_days=30)
    assert updated.current_version.number == 1  # still in use: the update did not change it
    waiting = pending_version(updated)
    assert waiting.number == 2 and texts_and_votes(waiting) == [(CALL_CALCULATOR, 3)]
    assert "v2, which waits for a reviewer to adopt it: v1 stays in use" in updated.events.latest("pk").reason
    with pytest.raises(ValidationError):
        services.strategy_version_adopt(strategy=updated, number=2, reviewer=reviewer, reason=" ")
    adopted = services.strategy_version_adopt(strategy=updated, number=2, reviewer=reviewer, reason="It holds up.")
    assert adopted.current_version.number == 2 and pending_version(adopted) is None
    event = adopted.events.latest("pk")
    assert (event.action, event.actor, event.snapshot["replaced"], event.version.number) == ("adopt", reviewer, 1, 2)
    with pytest.raises(ValidationError):  # not older, nor the one in use
        services.strategy_version_adopt(strategy=adopted, number=1, reviewer=reviewer, reason="back")


def test_a_strategy_on_trial_keeps_the_version_it_is_tested_with(reviewer):
    arithmetic_pair()
    [strategy] = insights_update(window_days=30)
    Strategy.objects.filter(pk=strategy.pk).update(status=Strategy.Status.TRIAL)
    offline_run("How much is a dozen eggs times four?", expected="48")
    insights_update(window_days=30)
    with pytest.raises(services.IllegalTransition):
        services.strategy_version_adopt(strategy=strategy, number=2, reviewer=reviewer, reason="now")
    strategy.refresh_from_db()
    assert strategy.current_version.number == 1


def test_a_rejected_list_is_left_alone(reviewer):
    arithmetic_pair()
    [strategy] = insights_update(window_days=30)
    services.strategy_reject(strategy=strategy, reviewer=reviewer, reason="not useful")
    offline_run("How much is a dozen eggs times four?", expected="48")
    assert insight_pairs(window_days=30) == [] and insights_update(window_days=30) == []
    assert strategy.versions.count() == 1


def test_an_edit_by_a_person_keeps_the_insights(reviewer):
    arithmetic_pair()
    [strategy] = insights_update(window_days=30)
    version = services.strategy_edit(strategy=strategy, editor=reviewer, title="Arithmetic insights")
    assert version.number == 2 and version.insights == strategy.current_version.insights


def test_the_live_insights_go_into_the_prompt_best_voted_first():
    arithmetic_pair()
    [strategy] = insights_update(window_days=30)
    version = strategy.current_version
    version.insights = [*version.insights, {"id": "low1", "text": "Give the number alone.", "votes": 1}]
    version.save()
    Strategy.objects.filter(pk=strategy.pk).update(status=Strategy.Status.ACTIVE)
    run = offline_run("What is 12 + 30?", expected="42")
    heading = "Insights from comparing failed and successful runs of similar tasks (best confirmed first):"
    assert f"{heading}\n- {CALL_CALCULATOR}\n- Give the number alone." in run.system_prompt
    assert version.new_guidance not in run.system_prompt  # it describes the list to reviewers only
    applied = AppliedStrategy.objects.get(run=run)
    assert (applied.strategy_version, applied.arm) == (version, AppliedStrategy.Arm.ACTIVE)
    # Another kind's run does not get them.
    other = offline_run("Summarise nothing at all", kind="general")
    assert heading not in other.system_prompt


def test_the_mining_command_updates_the_lists():
    import io

    arithmetic_pair()
    out = io.StringIO()
    call_command("mine_strategies", "--days", "30", stdout=out)
    assert "Insight lists proposed or given a new version: 1." in out.getvalue()
    assert "Insights for arithmetic tasks: v1, 1 insight(s)" in out.getvalue()


def test_a_failure_that_left_the_tools_result_out_teaches_to_answer_with_it():
    # As the local model did: both called the calculator; the failure answered with the expression.
    make_calculated_run(text="348 / 12 + 27", answer="348 / 12 + 27", value=56, good=False)
    make_calculated_run(text="270 / 9 + 22", answer="52", value=52, good=True)
    [strategy] = insights_update(window_days=30)
    assert texts_and_votes(strategy.current_version) == [
        ("For arithmetic tasks, answer with the result calculator returns, not with what you gave it.", 2)
    ]
