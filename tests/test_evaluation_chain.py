"""The evaluator chain: rounds, profile weights, failed evaluators, and human precedence."""

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.urls import reverse

from feedback import services
from feedback.evaluation.chain import composite_score, evaluate_run
from feedback.evaluation.profiles import DEFAULT_PROFILES, profile_for
from feedback.models import Evaluation, EvaluationProfile, Run, Task
from feedback.tasks import run_evaluate_task

from .factories import make_finished_run

pytestmark = pytest.mark.django_db

ANSWER = "(17 * 23 + 4) / 5 = 79"


def arithmetic_run(**kwargs) -> Run:
    return make_finished_run(text="What is (17 * 23 + 4) / 5?", output=ANSWER, expected_answer="79", **kwargs)


def test_a_kind_gets_its_default_profile_on_first_use():
    assert not EvaluationProfile.objects.exists()
    profile = profile_for(Task.Kind.EMAIL_TRIAGE)
    assert profile.evaluators == DEFAULT_PROFILES[Task.Kind.EMAIL_TRIAGE]
    assert profile_for(Task.Kind.EMAIL_TRIAGE).pk == profile.pk


def test_the_profile_checks_its_evaluator_list():
    profile = EvaluationProfile(task_kind=Task.Kind.GENERAL, evaluators=[{"evaluator": "astrology", "weight": -1}])
    with pytest.raises(ValidationError) as caught:
        profile.full_clean()
    assert "evaluator must be one of" in str(caught.value) and "weight must be a number" in str(caught.value)


def test_the_offline_chain_scores_a_run_with_the_profile_weights(settings):
    run = arithmetic_run()
    rows = run_evaluate_task(run.pk) or list(run.evaluations.all())
    by_kind = {e.kind: e for e in rows}
    assert set(by_kind) == {"reference", "rule", "judge"}
    assert all(e.status == Evaluation.Status.OK and e.round == 1 for e in rows)
    assert by_kind["judge"].evaluator == "offline_heuristic_judge"
    assert (by_kind["reference"].weight, by_kind["rule"].weight, by_kind["judge"].weight) == (0.6, 0.1, 0.3)
    # Reference 1 (79 is in the answer), rule 1 (has a digit), judge: offline heuristic.
    judge = by_kind["judge"].score
    run.refresh_from_db()
    assert run.score == pytest.approx((0.6 * 1 + 0.1 * 1 + 0.3 * judge) / 1.0, abs=1e-4)


def test_the_composite_honours_an_edited_profile():
    EvaluationProfile.objects.create(
        task_kind=Task.Kind.ARITHMETIC,
        evaluators=[
            {"evaluator": "reference", "weight": 3, "config": {}},
            {"evaluator": "rule", "weight": 1, "config": {"keywords": ["banana"]}},
        ],
    )
    run = arithmetic_run()
    evaluate_run(run.pk)
    run.refresh_from_db()
    assert run.score == pytest.approx((3 * 1.0 + 1 * 0.0) / 4)
    assert sorted(run.evaluations.values_list("kind", flat=True)) == ["reference", "rule"]


def test_an_inapplicable_evaluator_gives_no_row_and_no_weight():
    run = make_finished_run(output="4")  # no expected answer
    evaluate_run(run.pk)
    assert not run.evaluations.filter(kind="reference").exists()
    run.refresh_from_db()
    scores = {e.kind: (e.score, e.weight) for e in run.evaluations.all()}
    assert run.score == pytest.approx((scores["rule"][0] * 0.1 + scores["judge"][0] * 0.3) / 0.4, abs=1e-4)


@pytest.mark.parametrize(
    ("behaviour", "message"),
    [("invalid_json", "invalid JSON"), ("slow", "timed out"), ("out_of_range", "outside 0..1")],
)
def test_a_failing_llm_judge_is_recorded_and_the_run_keeps_its_other_scores(
    judge_server, client, reviewer, behaviour, message
):
    judge_server.behaviour = behaviour
    run = arithmetic_run()
    evaluate_run(run.pk)
    judge = run.evaluations.get(kind="judge")
    assert judge.status == Evaluation.Status.FAILED and judge.score is None
    assert judge.evaluator == "llm_judge:judge-test"
    assert message in judge.feedback and message in judge.details["error"]
    ok = run.evaluations.filter(status=Evaluation.Status.OK)
    assert sorted(ok.values_list("kind", flat=True)) == ["reference", "rule"]
    run.refresh_from_db()
    assert run.score == pytest.approx(1.0)  # reference 1 and rule 1, renormalised without the judge

    client.force_login(reviewer)
    html = client.get(reverse("feedback-run-detail", args=[run.pk])).content.decode()
    assert "Evaluator failed" in html and message in html


def test_a_working_llm_judge_counts_in_the_composite(judge_server):
    judge_server.score = 0.2
    run = arithmetic_run()
    evaluate_run(run.pk)
    run.refresh_from_db()
    assert run.score == pytest.approx(0.6 * 1 + 0.1 * 1 + 0.3 * 0.2)


def test_evaluation_is_idempotent_and_a_new_round_keeps_history(reviewer, django_capture_on_commit_callbacks):
    run = arithmetic_run()
    assert len(evaluate_run(run.pk)) == 3
    assert evaluate_run(run.pk) == []  # a redelivered task does no double work
    with django_capture_on_commit_callbacks() as queued:
        number = services.run_reevaluate(run=run, user=reviewer)
    assert number == 2 and len(queued) == 1  # run_evaluate_task, once the transaction commits
    evaluate_run(run.pk, expected_round=number)  # what the worker does with it
    assert sorted(set(run.evaluations.values_list("round", flat=True))) == [1, 2]
    assert run.evaluations.count() == 6
    assert evaluate_run(run.pk, expected_round=2) == []  # round 2 is written once only


def test_an_active_run_is_not_evaluated():
    run = arithmetic_run(status=Run.Status.RUNNING)
    assert evaluate_run(run.pk) == []
    assert evaluate_run(999_999) == []


def test_a_human_score_outranks_the_evaluators_and_the_latest_one_wins(reviewer, make_reviewer):
    run = arithmetic_run()
    evaluate_run(run.pk)
    services.run_add_human_score(run=run, user=reviewer, score=0.25, comment="Right number, no working shown.")
    run.refresh_from_db()
    assert run.score == 0.25
    second = make_reviewer("second-reviewer")
    services.run_add_human_score(run=run, user=second, score=0.5, corrected_answer="79")
    run.refresh_from_db()
    assert run.score == 0.5
    # A later automatic round does not override people either.
    evaluate_run(run.pk, expected_round=2)
    run.refresh_from_db()
    assert run.score == 0.5
    assert composite_score(run) == 0.5
    human = run.evaluations.filter(kind="human").order_by("id")
    assert [h.author.username for h in human] == ["reviewer", "second-reviewer"]


def test_only_reviewers_score_and_scores_stay_in_range(operator, reviewer):
    run = arithmetic_run()
    with pytest.raises(PermissionDenied):
        services.run_add_human_score(run=run, user=operator, score=0.5)
    with pytest.raises(ValueError):
        services.run_add_human_score(run=run, user=reviewer, score=1.5)
