"""Outcomes that hold (issue 23, point 6): *accomplished* needs evidence (a reference, an LLM judge
the operator configured, a person); without it the outcome is unknown and the heuristic judge's
"yes" stays a hint; a run whose tool calls all failed is never accomplished."""

import pytest
from django.urls import reverse

from feedback.evaluation.chain import evaluate_run
from feedback.models import Run, Step, Task
from feedback.services import run_add_human_score

from .factories import make_finished_run

pytestmark = pytest.mark.django_db

ARITHMETIC = "What is (17 * 23 + 4) / 5?"
# A confident, wrong answer: the heuristic judge reads new numbers on topic and says yes.
WRONG = "(17 * 23 + 4) / 5 = 80.2, computed step by step: 17 * 23 = 391, plus 4 is 395."


def evaluated(run: Run) -> Run:
    evaluate_run(run.pk)
    run.refresh_from_db()
    return run


def _calls(run: Run, *results: str) -> Run:
    """Tool calls on ``run``: each "" succeeded, any other text is the call's error."""
    for index, error in enumerate(results):
        Step.objects.create(
            run=run,
            index=index,
            turn=index,
            kind=Step.Kind.TOOL_CALL,
            tool_name="calculator",
            arguments={"expression": "17*23+4"},
            success=not error,
            error=error,
            error_class="ToolError" if error else "",
        )
    return run


def test_the_heuristic_judge_alone_leaves_the_outcome_unknown(client, operator):
    run = evaluated(make_finished_run(text=ARITHMETIC, output=WRONG))
    judge = run.evaluations.get(kind="judge")
    assert judge.evaluator == "offline_heuristic_judge" and judge.accomplished is True  # its hint
    assert run.outcome == Run.Outcome.UNKNOWN  # not evidence
    client.force_login(operator)
    html = client.get(reverse("feedback-run-detail", args=[run.pk])).content.decode()
    assert '<span id="run-outcome"><span class="muted">Unknown</span>' in html
    assert '<p class="hint" id="outcome-hint">Hint only: the offline heuristic judge' in html


def test_a_configured_llm_judge_is_evidence(judge_server):
    judge_server.score, judge_server.accomplished = 0.9, True
    run = evaluated(make_finished_run(text=ARITHMETIC, output="(17 * 23 + 4) / 5 = 79"))
    assert run.evaluations.get(kind="judge").evaluator.startswith("llm_judge:")
    assert run.outcome == Run.Outcome.ACCOMPLISHED


def test_the_reference_is_evidence_either_way():
    right = evaluated(make_finished_run(text=ARITHMETIC, output="(17 * 23 + 4) / 5 = 79", expected_answer="79"))
    wrong = evaluated(make_finished_run(text=ARITHMETIC, output=WRONG, expected_answer="79"))
    assert (right.outcome, wrong.outcome) == (Run.Outcome.ACCOMPLISHED, Run.Outcome.NOT_ACCOMPLISHED)


def test_a_persons_verdict_is_evidence(reviewer, client):
    run = evaluated(make_finished_run(text=ARITHMETIC, output="(17 * 23 + 4) / 5 = 79"))
    assert run.outcome == Run.Outcome.UNKNOWN
    run_add_human_score(run=run, user=reviewer, score=1.0, outcome=Run.Outcome.ACCOMPLISHED)
    run.refresh_from_db()
    assert run.outcome == Run.Outcome.ACCOMPLISHED
    client.force_login(reviewer)
    html = client.get(reverse("feedback-run-detail", args=[run.pk])).content.decode()
    assert 'id="outcome-hint"' not in html  # decided: no hint


def test_a_run_whose_tool_calls_all_failed_is_never_accomplished(judge_server):
    judge_server.score, judge_server.accomplished = 0.95, True
    matched = _calls(make_finished_run(text=ARITHMETIC, output="= 79", expected_answer="79"), "Timeout", "Timeout")
    judged = _calls(make_finished_run(text=ARITHMETIC, output="(17 * 23 + 4) / 5 = 79"), "Division error")
    for run in (evaluated(matched), evaluated(judged)):
        assert run.outcome == Run.Outcome.NOT_ACCOMPLISHED, run.evaluations.values_list("evaluator", "accomplished")


def test_one_call_that_went_through_is_enough_for_the_evidence_to_decide(judge_server):
    judge_server.score, judge_server.accomplished = 0.95, True
    run = _calls(make_finished_run(text=ARITHMETIC, output="(17 * 23 + 4) / 5 = 79"), "Timeout", "")
    assert evaluated(run).outcome == Run.Outcome.ACCOMPLISHED


def test_mining_does_not_count_a_heuristic_yes_as_a_success():
    from feedback.strategies.patterns import _succeeding

    run = evaluated(make_finished_run(text=ARITHMETIC, output=WRONG, kind=Task.Kind.ARITHMETIC))
    assert run.score >= 0.8  # a high heuristic score...
    assert not Run.objects.filter(_succeeding(), pk=run.pk).exists()  # ...is not a success to learn from


def test_the_outcomes_precision_counts_only_runs_called_accomplished_with_a_verdict():
    from feedback.metrics.precision import precision

    A, N, U = Run.Outcome.ACCOMPLISHED, Run.Outcome.NOT_ACCOMPLISHED, Run.Outcome.UNKNOWN
    figure = precision([(A, True), (A, False), (A, True), (A, None), (N, True), (U, True)])
    assert figure == {"n": 3, "passed": 2, "precision": 2 / 3}
    assert precision([(U, True)]) == {"n": 0, "passed": 0, "precision": None}


def test_the_metrics_page_shows_the_outcome_s_precision_against_the_dataset_checker(client, operator):
    from feedback.datasets.services import dataset_from_runs

    # Two dataset items whose expected answer is 42; two experiment runs both answer with a
    # reference that says "accomplished" (the expected answer is in the task), one of them wrong by
    # the checker's stricter reading (its last figure is 41).
    source = make_finished_run(output="It is 42.", text="What is 6 * 7?", user=operator)
    version = dataset_from_runs(runs=[source], user=operator, checker="numeric", name="sums")
    item = version.items.get()
    for answer in ("6 * 7 = 42", "42, or rather 41"):
        run = make_finished_run(
            output=answer,
            expected_answer="42",
            text="What is 6 * 7?",
            user=operator,
            purpose=Run.Purpose.EXPERIMENT,
            dataset_item=item,
        )
        evaluate_run(run.pk)
    client.force_login(operator)
    html = client.get(reverse("feedback-metrics")).content.decode()
    figure = html[html.index('id="figure-outcome-precision"') :][:900]
    assert ">50 %<" in figure and "the checker passes 1 of 2 runs called accomplished" in figure
    assert "runs with a dataset item only, not production runs" in figure
