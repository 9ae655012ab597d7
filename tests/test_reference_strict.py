"""The reference evaluator credits what an answer asserts, not what it only quotes from the task,
negates or hedges (issue 15: a real small model echoed the question, or said "low priority, not
urgent", and got 1.0)."""

import pytest

from feedback.evaluation.profiles import DEFAULT_PROFILES
from feedback.evaluation.reference import reference_evaluator
from feedback.models import Task

from .factories import make_finished_run

pytestmark = pytest.mark.django_db

EMAIL_TASK = (
    "Is this email urgent or low priority? From ops@northwind.example: the dashboard has been down "
    "since 09:10 for all our users."
)
CRATE_TASK = "A crate holds 24 bottles. Half of them are sold, then 12 more arrive. How many bottles are in the crate?"
SUM_TASK = "What is (17 * 23 + 4) / 5?"


def email_reference_config() -> dict:
    """The email-triage profile's reference configuration, as a fresh database gets it."""
    return next(e["config"] for e in DEFAULT_PROFILES[Task.Kind.EMAIL_TRIAGE] if e["evaluator"] == "reference")


def triage(output: str, expected: str = "urgent", text: str = EMAIL_TASK, config: dict | None = None):
    run = make_finished_run(text=text, output=output, expected_answer=expected, kind=Task.Kind.EMAIL_TRIAGE)
    return reference_evaluator(run, email_reference_config() if config is None else config)


def arithmetic(output: str, expected: str = "79", text: str = SUM_TASK):
    run = make_finished_run(text=text, output=output, expected_answer=expected)
    return reference_evaluator(run, {"mode": "auto", "tolerance": 1e-6})


class TestEcho:
    def test_an_answer_that_echoes_the_question_scores_zero(self):
        verdict = triage(EMAIL_TASK)
        assert verdict.score == 0.0 and verdict.accomplished is False
        assert verdict.feedback == "The answer only echoes the task."

    def test_a_label_the_answer_has_only_by_quoting_the_task_is_not_evidence(self):
        verdict = triage("You asked: is this email urgent or low priority? I will look into it.")
        assert verdict.score == 0.0
        assert "“urgent” appears only where the answer repeats the task" in verdict.feedback

    def test_a_number_the_answer_has_only_by_quoting_the_task_is_not_evidence(self):
        echoed = arithmetic(CRATE_TASK, expected="24", text=CRATE_TASK)
        assert echoed.score == 0.0 and echoed.feedback == "The answer only echoes the task."
        restated = arithmetic("So: a crate holds 24 bottles. Half of them are sold. Hmm.", expected="24",
                              text=CRATE_TASK)  # fmt: skip
        assert restated.score == 0.0
        assert "24 appears only where the answer repeats the task" in restated.feedback

    def test_an_echoed_choice_of_options_scores_zero_but_picking_one_scores_one(self):
        task = "Which is right: “the report has 80 words” or “the report has 81 words”?"
        run = make_finished_run(text=task, output=task, expected_answer="the report has 80 words")
        assert reference_evaluator(run, {}).score == 0.0
        # The answer to a choice repeats the option it picks: that is an answer, not an echo.
        run = make_finished_run(text=task, output="The report has 80 words.", expected_answer="the report has 80 words")
        assert reference_evaluator(run, {}).score == 1.0

    def test_restating_the_question_before_answering_keeps_full_credit(self):
        assert arithmetic(f"{SUM_TASK} (17 * 23 + 4) / 5 = 79").score == 1.0
        verdict = arithmetic("A crate holds 24 bottles; 12 are sold and 12 arrive, so there are 24 bottles.",
                             expected="24", text=CRATE_TASK)  # fmt: skip
        assert verdict.score == 1.0 and verdict.accomplished is True

    def test_a_regex_matched_only_inside_the_echo_is_not_credited(self):
        task = "Count the words of report.txt: reply like “80 words”."
        run = make_finished_run(text=task, output=task, expected_answer="/\\b80 words/")
        verdict = reference_evaluator(run, {})
        assert verdict.score == 0.0 and verdict.feedback == "The answer only echoes the task."


class TestNegation:
    def test_low_priority_not_urgent_against_urgent_scores_zero(self):
        verdict = triage("low priority, not urgent")
        assert verdict.score == 0.0 and verdict.accomplished is False
        assert "“urgent” is negated: “not urgent”" in verdict.feedback
        assert "“low priority” contradicts “urgent”" in verdict.feedback

    @pytest.mark.parametrize(
        ("output", "negation"),
        [
            ("Not urgent.", "not urgent"),
            ("This email isn't urgent.", "isn't urgent"),
            ("This email isn’t urgent.", "isn't urgent"),
            ("There are no urgent emails.", "no urgent"),
            ("A non-urgent request about the dashboard.", "non-urgent"),
            ("None of these emails is urgent.", "none of these emails is urgent"),
            ("Urgent: none.", "urgent: none"),
        ],
    )
    def test_a_negated_label_is_not_credited(self, output, negation):
        # Without the profile's contradictions: negation alone is enough, in every profile.
        verdict = triage(output, config={})
        assert verdict.score == 0.0
        assert f"“urgent” is negated: “{negation}”" in verdict.feedback

    @pytest.mark.parametrize(
        "output",
        ["Urgent.", "Not spam but urgent.", "No, this one is urgent.", "It is not spam; it is urgent.",
         "Urgent (not low priority): the dashboard is down."],
    )  # fmt: skip
    def test_a_label_outside_a_negations_reach_is_credited(self, output):
        verdict = triage(output)
        assert verdict.score == 1.0 and verdict.accomplished is True

    def test_a_negated_label_of_a_set_costs_its_share(self):
        verdict = triage("Billing, not urgent.", expected="billing, urgent")
        assert verdict.score == 0.5
        assert "“urgent” is negated: “not urgent”" in verdict.feedback


class TestContradiction:
    def test_a_contradicting_label_instead_of_the_expected_one_is_named(self):
        verdict = triage("Low priority: it can wait until Monday.")
        assert verdict.score == 0.0
        assert "“low priority” contradicts “urgent”" in verdict.feedback

    def test_an_answer_asserting_both_labels_gets_half_and_no_verdict_of_success(self):
        verdict = triage("Urgent, or possibly low priority.")
        assert verdict.score == 0.5 and verdict.accomplished is False
        assert "also says “low priority”, which contradicts “urgent”" in verdict.feedback

    def test_contradictions_work_both_ways(self):
        verdict = triage("Urgent!", expected="low priority")
        assert verdict.score == 0.0 and "“urgent” contradicts “low priority”" in verdict.feedback
        assert triage("Not urgent.", expected="not urgent").score == 1.0


class TestNumbers:
    def test_a_list_of_candidates_with_the_right_number_gets_only_its_share(self):
        verdict = arithmetic("It could be 77, 78, 79 or 80.")
        assert verdict.score == pytest.approx(0.25) and verdict.accomplished is False
        assert "hedges between 77, 78, 79 and 80" in verdict.feedback

    def test_the_number_the_answer_concludes_decides_not_one_on_the_way(self):
        verdict = arithmetic("I first thought 79, but the answer is 80.")
        assert verdict.score == 0.0
        assert verdict.feedback.startswith("The answer concludes 80, not the expected 79")

    def test_a_negated_number_is_not_credited(self):
        verdict = arithmetic("It is not 79; it is 80.")
        assert verdict.score == 0.0 and "79 is negated: “not 79”" in verdict.feedback

    @pytest.mark.parametrize(
        "output",
        [
            "(17 * 23 + 4) / 5 = 79",
            "17 * 23 = 391, 391 + 4 = 395, 395 / 5 = 79",
            "(17 × 23 + 4) / 5 = (391 + 4) / 5 = 395 / 5 = 79",
            "The answer is **79** (check: 79 * 5 = 395).",
            "(17 * 23 + 4) / 5 = 79, check: 79 * 5 = 395",
            "**Answer:** 79",
            "79",
            "I cannot be sure, but (17 * 23 + 4) / 5 = 79",
        ],
    )
    def test_worked_answers_keep_full_credit(self, output):
        verdict = arithmetic(output)
        assert verdict.score == 1.0 and verdict.accomplished is True

    def test_several_quantities_are_not_candidates_of_one_another(self):
        output = "It has 80 words in 5 sentences and 12 lines."
        run = make_finished_run(text="Count the words in report.txt", output=output, expected_answer="80",
                                kind=Task.Kind.FILE_ANALYSIS)  # fmt: skip
        assert reference_evaluator(run, {}).score == 1.0
