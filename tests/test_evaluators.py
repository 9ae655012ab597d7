"""Each evaluator kind on crafted runs; the LLM judge against a local OpenAI-compatible server."""

import importlib

import pytest

from feedback.evaluation.evaluators import EvaluatorError, normalise, rule_evaluator
from feedback.evaluation.judge import judge_evaluator, judge_name, offline_heuristic_judge
from feedback.evaluation.profiles import DEFAULT_PROFILES, profile_for
from feedback.evaluation.reference import choose_mode, reference_evaluator
from feedback.models import EvaluationProfile, Run, Step, Task

from .factories import make_finished_run

pytestmark = pytest.mark.django_db


class TestRuleEvaluator:
    def test_all_checks_pass(self):
        run = make_finished_run(output="Two emails are URGENT: 002 and 005.")
        verdict = rule_evaluator(run, {"keywords": ["urgent"], "min_length": 10, "format_regex": r".*\d{3}.*"})
        assert verdict.score == 1.0
        assert verdict.feedback == "All checks passed."

    def test_the_score_is_the_share_of_checks_passed(self):
        run = make_finished_run(output="short")
        verdict = rule_evaluator(run, {"keywords": ["urgent", "short"], "min_length": 40, "format_regex": ".*"})
        assert verdict.score == 0.5  # "short" and the regex pass; "urgent" and the length fail
        assert "mentions “urgent”" in verdict.feedback and "at least 40 characters" in verdict.feedback

    def test_a_failed_run_loses_a_check(self):
        run = make_finished_run(output="", status=Run.Status.FAILED)
        verdict = rule_evaluator(run, {})
        assert verdict.score == 0.0
        assert "ended failed" in verdict.feedback

    def test_a_bad_regex_is_the_evaluators_failure(self):
        with pytest.raises(EvaluatorError, match="format_regex"):
            rule_evaluator(make_finished_run(output="x"), {"format_regex": "(["})


def email_rule_config() -> dict:
    """The email-triage profile's rule configuration, as a fresh database gets it."""
    return next(e["config"] for e in DEFAULT_PROFILES[Task.Kind.EMAIL_TRIAGE] if e["evaluator"] == "rule")


class TestEmailTriageRule:
    """The rule checks what every triage answer has (it speaks of the emails or their urgency),
    not one label: an inbox with no urgent email is rightly answered without "urgent" in it."""

    def test_an_inbox_with_no_urgent_email_answered_no_email_is_urgent_passes_the_rule(self):
        run = make_finished_run(output="No email is urgent", kind=Task.Kind.EMAIL_TRIAGE,
                                text="Classify the emails in inbox/ and flag the urgent ones")  # fmt: skip
        verdict = rule_evaluator(run, email_rule_config())
        assert verdict.score == 1.0 and verdict.feedback == "All checks passed."

    @pytest.mark.parametrize(
        "output",
        ["None are urgent.", "Nothing in the inbox needs attention today.",
         "All 6 emails are low priority: billing questions and a feature request."],
    )  # fmt: skip
    def test_the_triage_rule_requires_no_particular_label(self, output):
        verdict = rule_evaluator(make_finished_run(output=output, kind=Task.Kind.EMAIL_TRIAGE), email_rule_config())
        assert verdict.score == 1.0, verdict.feedback

    def test_the_triage_rule_fails_an_answer_that_does_not_address_the_emails(self):
        verdict = rule_evaluator(make_finished_run(output="Done.", kind=Task.Kind.EMAIL_TRIAGE), email_rule_config())
        assert verdict.score == 0.0
        assert verdict.feedback.startswith("Failed: mentions one of “mail”, “message”, “inbox”")

    def test_any_keywords_must_be_a_list_of_words(self):
        with pytest.raises(EvaluatorError, match="any_keywords"):
            rule_evaluator(make_finished_run(output="x"), {"any_keywords": "urgent"})

    def test_a_stored_profile_still_holding_the_old_triage_default_is_migrated_to_the_new_one(self):
        from django.apps import apps

        migration = importlib.import_module("feedback.migrations.0022_triage_profile_default")
        assert DEFAULT_PROFILES[Task.Kind.EMAIL_TRIAGE] == migration.NEW  # the migration's copy is current
        EvaluationProfile.objects.create(task_kind=Task.Kind.EMAIL_TRIAGE, evaluators=migration.OLD)
        migration.forwards(apps, None)
        assert EvaluationProfile.objects.get().evaluators == DEFAULT_PROFILES[Task.Kind.EMAIL_TRIAGE]

    def test_an_edited_triage_profile_is_left_alone_by_the_migration(self):
        from django.apps import apps

        migration = importlib.import_module("feedback.migrations.0022_triage_profile_default")
        edited = [{"evaluator": "rule", "weight": 1, "config": {"keywords": ["urgent"], "min_length": 20}}]
        EvaluationProfile.objects.create(task_kind=Task.Kind.EMAIL_TRIAGE, evaluators=edited)
        migration.forwards(apps, None)
        assert profile_for(Task.Kind.EMAIL_TRIAGE).evaluators == edited


class TestReferenceEvaluator:
    @pytest.mark.parametrize(
        ("expected", "mode"),
        [
            ("79", "numeric"),
            ("1,234.5", "numeric"),
            ("/^\\d+ words$/", "regex"),
            ("002, 005", "labels"),
            ("urgent\nnot urgent", "labels"),
            ("Paris", "normalised"),
            ("The report has 80 words", "normalised"),
        ],
    )
    def test_the_mode_follows_the_expected_answer(self, expected, mode):
        assert choose_mode(expected) == mode

    def test_numeric_within_tolerance(self):
        run = make_finished_run(output="(17 * 23 + 4) / 5 = 79.0000001", expected_answer="79")
        verdict = reference_evaluator(run, {"mode": "auto", "tolerance": 1e-6})
        assert verdict.score == 1.0 and verdict.details["mode"] == "numeric"

    def test_a_list_items_number_is_no_figure_the_answer_states(self):
        plan = "I'll follow these steps:\n1. List the files.\n2. Read each one.\n3. Count the urgent ones."
        for expected in ("1", "2", "3"):
            run = make_finished_run(output=plan, expected_answer=expected)
            verdict = reference_evaluator(run, {})
            assert verdict.score == 0.0 and verdict.details["own"] == [], verdict
        run = make_finished_run(
            output="Steps:\n1. Read the emails.\n2. Two are urgent: the answer is 2", expected_answer="2"
        )
        assert reference_evaluator(run, {}).score == 1.0

    def test_numeric_wrong(self):
        run = make_finished_run(output="The result is 80.", expected_answer="79")
        assert reference_evaluator(run, {}).score == 0.0

    def test_labels_score_the_share_found(self):
        run = make_finished_run(output="Urgent: 002 only.", expected_answer="002, 005", kind=Task.Kind.EMAIL_TRIAGE)
        verdict = reference_evaluator(run, {})
        assert verdict.score == 0.5
        assert verdict.feedback == "Missing labels: 005."

    def test_labels_with_the_full_set_cost_precision_too(self):
        run = make_finished_run(output="Urgent: 002, 003, 005.", expected_answer="002, 005")
        verdict = reference_evaluator(run, {"all_labels": ["001", "002", "003", "004", "005", "006"]})
        # predicted {002, 003, 005}: precision 2/3, recall 1 → F1 0.8
        assert verdict.score == pytest.approx(0.8)

    def test_regex(self):
        run = make_finished_run(output="It has 80 words.", expected_answer="/\\b80 words\\b/")
        assert reference_evaluator(run, {}).score == 1.0
        run = make_finished_run(output="It has 81 words.", expected_answer="/\\b80 words\\b/")
        assert reference_evaluator(run, {}).score == 0.0

    def test_exact_and_normalised(self):
        run = make_finished_run(output="  paris. ", expected_answer="Paris")
        assert reference_evaluator(run, {"mode": "exact"}).score == 0.0
        assert reference_evaluator(run, {"mode": "normalised"}).score == 1.0
        run = make_finished_run(output="The capital is PARIS!", expected_answer="Paris")
        assert reference_evaluator(run, {}).score == 1.0
        run = make_finished_run(output="The capital is Parisian", expected_answer="Paris")
        assert reference_evaluator(run, {}).score == 0.0

    def test_no_expected_answer_means_not_applicable(self):
        assert reference_evaluator(make_finished_run(output="4"), {}) is None

    def test_an_unknown_mode_is_the_evaluators_failure(self):
        with pytest.raises(EvaluatorError, match="Unknown reference mode"):
            reference_evaluator(make_finished_run(output="4", expected_answer="4"), {"mode": "vibes"})

    def test_normalise(self):
        assert normalise("  Hello,   WORLD. 3.5 ") == "hello world 3.5"


class TestOfflineJudge:
    def test_it_is_named_as_offline(self, settings):
        settings.LLM_BACKEND = "offline"
        assert judge_name() == "offline_heuristic_judge"

    def test_a_good_run_scores_high_and_a_failed_one_low(self):
        good = make_finished_run(
            text="Summarise report.txt and count its words",
            output="The report summarises quarterly words: it has 80 words.",
        )
        bad = make_finished_run(text="Summarise report.txt and count its words", status=Run.Status.FAILED)
        Step.objects.create(run=bad, index=0, kind=Step.Kind.TOOL_CALL, tool_name="read_file", success=False)
        high, low = offline_heuristic_judge(good, {}), offline_heuristic_judge(bad, {})
        # Task words {summarise, report, txt, count, words}; the answer has {report, words}: on
        # topic 2/5. New: "summarises", "quarterly" and 80, three pieces: full substance.
        assert high.details["parts"]["on_topic"] == pytest.approx(0.4)
        assert high.details["new_information"] == ["quarterly", "summarises", "80"]
        assert high.score == pytest.approx(0.55 + 0.15 * 0.4 + 0.15 + 0.15)
        assert high.accomplished is True
        assert low.score == 0.0 and low.accomplished is False
        assert low.feedback.startswith("Offline heuristic judge (no LLM):")
        assert "1 of 1 tool calls failed" in low.feedback


class TestLLMJudge:
    def test_a_good_reply_is_a_score(self, judge_server):
        judge_server.score = 0.9
        run = make_finished_run(output="4", expected_answer="4")
        verdict = judge_evaluator(run, {})
        assert verdict.score == 0.9 and verdict.feedback == "Correct and complete."
        assert verdict.accomplished is True
        assert verdict.details["model"] == "judge-test" and verdict.details["tokens_in"] == 42
        request = judge_server.requests[-1]
        assert request["response_format"]["type"] == "json_schema"
        schema = request["response_format"]["json_schema"]["schema"]
        assert schema["required"] == ["score", "accomplished", "feedback"]
        assert schema["properties"]["accomplished"] == {
            "type": "boolean", "description": "true only if the answer does what the task asked"
        }  # fmt: skip
        assert "Expected answer:\n4" in request["messages"][1]["content"]
        assert judge_name() == "llm_judge:judge-test"

    def test_invalid_json_fails(self, judge_server):
        judge_server.behaviour = "invalid_json"
        with pytest.raises(EvaluatorError, match="invalid JSON") as caught:
            judge_evaluator(make_finished_run(output="4"), {})
        assert "9/10" in caught.value.details["reply"]

    def test_a_score_out_of_range_fails(self, judge_server):
        judge_server.behaviour = "out_of_range"
        with pytest.raises(EvaluatorError, match=r"outside 0\.\.1"):
            judge_evaluator(make_finished_run(output="4"), {})

    def test_a_timeout_fails(self, judge_server):
        judge_server.behaviour = "slow"
        with pytest.raises(EvaluatorError, match="timed out after 1 s"):
            judge_evaluator(make_finished_run(output="4"), {})
