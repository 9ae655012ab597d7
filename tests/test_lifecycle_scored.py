"""Every change of a run's score or outcome goes through one place (feedback/lifecycle.py's
run_scored): the first round of its evaluation, a reviewer's score, a re-evaluation. Each writes
the score and outcome by the chain's rules and queues what follows: the run's trace with its
first round, any later evaluation as spans of its own."""

import pytest

from feedback import services
from feedback.evaluation.chain import evaluate_run
from feedback.models import Evaluation, Run

from .factories import make_finished_run

pytestmark = pytest.mark.django_db

EXPORT = "feedback.tasks.run_export_task"
EVALUATIONS_EXPORT = "feedback.tasks.evaluations_export_task"
EVALUATE = "feedback.tasks.run_evaluate_task"


def test_the_first_round_a_reviewer_s_score_and_a_re_evaluation_each_score_the_run_once(
    reviewer, settings, sent_tasks, django_capture_on_commit_callbacks
):
    settings.OTEL_EXPORT_RUNS = True
    run = make_finished_run(text="What is 2 + 2?", output="2 + 2 = 4", expected_answer="4")

    with django_capture_on_commit_callbacks(execute=True):
        first = evaluate_run(run.pk)
    run.refresh_from_db()
    assert (run.outcome, run.score) == (Run.Outcome.ACCOMPLISHED, pytest.approx(1.0, abs=0.2))
    assert sent_tasks == [(EXPORT, (run.pk,), {})]
    assert {e.round for e in first} == {1}

    with django_capture_on_commit_callbacks(execute=True):
        human = services.run_add_human_score(run=run, user=reviewer, score=0.2, outcome="not_accomplished")
    run.refresh_from_db()
    assert (run.outcome, run.score) == (Run.Outcome.NOT_ACCOMPLISHED, 0.2)  # a person outranks the evaluators
    assert sent_tasks[-1] == (EVALUATIONS_EXPORT, ([human.pk],), {})

    with django_capture_on_commit_callbacks(execute=True):
        number = services.run_reevaluate(run=run, user=reviewer)
        again = evaluate_run(run.pk, expected_round=number)
    run.refresh_from_db()
    assert (number, {e.round for e in again}) == (2, {2})
    assert (run.outcome, run.score) == (Run.Outcome.NOT_ACCOMPLISHED, 0.2)  # the person's still
    assert sent_tasks[-2:] == [
        (EVALUATE, (run.pk,), {"expected_round": 2}),
        (EVALUATIONS_EXPORT, (sorted(e.pk for e in again),), {}),
    ]
    assert [name for name, _, _ in sent_tasks].count(EXPORT) == 1  # the run's spans went once


def test_a_run_without_an_answer_is_scored_without_the_judge(judge_server):
    failed = make_finished_run(status=Run.Status.FAILED, text="What is 2 + 2?")
    cancelled = make_finished_run(status=Run.Status.CANCELLED, text="What is 2 + 2?")
    answered = make_finished_run(text="What is 2 + 2?", output="2 + 2 = 4")
    for run in (failed, cancelled):
        rows = evaluate_run(run.pk)
        run.refresh_from_db()
        assert {r.kind for r in rows} == {Evaluation.Kind.RULE}  # no expected answer: no reference either
        assert (run.score, run.outcome) == (0.0, Run.Outcome.NOT_ACCOMPLISHED)
    assert judge_server.requests == []
    rows = evaluate_run(answered.pk)
    assert Evaluation.Kind.JUDGE in {r.kind for r in rows} and len(judge_server.requests) == 1
