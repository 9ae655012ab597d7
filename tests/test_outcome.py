"""Trust: "Answered" (the process ended with a final answer) is not "accomplished" (the task
done). The evaluators decide a run's outcome; failures reach the review queue, mining and the
success rate without an expected answer; mining reads an explicit window, and only that window."""

from datetime import datetime, time, timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from feedback import metrics, selectors, tasks
from feedback.evaluation.chain import evaluate_run
from feedback.evaluation.evaluators import EvaluatorError
from feedback.evaluation.judge import judge_evaluator, offline_heuristic_judge
from feedback.metrics import Window
from feedback.models import Run, Step, Strategy, StrategyEvent, Task
from feedback.strategies.mining import mine
from feedback.strategies.proposals import mine_and_propose

from .factories import make_finished_run, make_run
from .judge_server import BAD_ACCOMPLISHED
from .strategy_history import add_run

pytestmark = pytest.mark.django_db

K = Task.Kind
RELEASE_TASK = "Summarise release-notes.txt and count its words"
TRIAGE_TASK = "Classify the emails in inbox/ and flag the urgent ones"
GAVE_UP = "I could not find release-notes.txt: No such file or directory: release-notes.txt"
SUMMARY = (
    "Summary of report.txt: Quarterly revenue grew by twelve percent while support tickets fell. "
    "It has 80 words in 5 sentences and 9 lines. Frequent words: revenue, tickets, support."
)


def gave_up_run(**fields) -> Run:
    """What the offline demo model answers when release-notes.txt is not at the root."""
    return make_finished_run(text=RELEASE_TASK, kind=K.FILE_ANALYSIS, output=GAVE_UP, **fields)


def summary_run(**fields) -> Run:
    return make_finished_run(text="Summarise report.txt and count its words", kind=K.FILE_ANALYSIS, output=SUMMARY,
                             **fields)  # fmt: skip


def evaluated(run: Run) -> Run:
    evaluate_run(run.pk)
    run.refresh_from_db()
    return run


def test_an_answer_that_could_not_find_the_file_is_not_accomplished(client, reviewer):
    run = evaluated(gave_up_run())
    assert run.status == Run.Status.SUCCEEDED  # the process ended with an answer...
    assert run.outcome == Run.Outcome.NOT_ACCOMPLISHED  # ...which does not do the task
    judge = run.evaluations.get(kind="judge")
    assert judge.evaluator == "offline_heuristic_judge" and judge.score < 0.3 and judge.accomplished is False
    rule = run.evaluations.get(kind="rule")
    assert rule.accomplished is False and "gives up (“I could not”)" in rule.feedback

    client.force_login(reviewer)
    html = client.get(reverse("feedback-run-detail", args=[run.pk])).content.decode()
    assert '<span class="badge status-succeeded" id="run-status">Answered</span>' in html
    assert "Succeeded" not in html
    assert '<span id="run-outcome"><span class="badge outcome-not_accomplished">Not accomplished</span>' in html


def test_a_correct_answer_is_accomplished(judge_server):
    # Issue 23: no expected answer and only the offline heuristic judge is no evidence (its "yes"
    # stays a hint, tests/test_outcome_evidence.py); an LLM judge the operator configured decides.
    judge_server.score, judge_server.accomplished = 0.9, True
    by_judge = evaluated(summary_run())  # no expected answer: the judge decides
    assert by_judge.outcome == Run.Outcome.ACCOMPLISHED
    assert by_judge.evaluations.get(kind="judge").accomplished is True
    assert by_judge.evaluations.get(kind="rule").accomplished is None  # form alone proves nothing
    by_reference = evaluated(make_finished_run(text="What is (17 * 23 + 4) / 5?", output="(17 * 23 + 4) / 5 = 79",
                                               expected_answer="79"))  # fmt: skip
    assert by_reference.outcome == Run.Outcome.ACCOMPLISHED
    assert by_reference.evaluations.get(kind="reference").accomplished is True


def test_the_reference_decides_when_the_task_has_an_expected_answer():
    hedged = evaluated(make_finished_run(text="What is (17 * 23 + 4) / 5?", expected_answer="79",
                                         output="I cannot be sure, but (17 * 23 + 4) / 5 = 79"))  # fmt: skip
    assert hedged.evaluations.get(kind="rule").accomplished is False  # sounds like giving up...
    assert hedged.outcome == Run.Outcome.ACCOMPLISHED  # ...but the known answer is there
    wrong = evaluated(make_finished_run(text="What is (17 * 23 + 4) / 5?", expected_answer="79",
                                        output="(17 * 23 + 4) / 5 = 80"))  # fmt: skip
    assert wrong.evaluations.get(kind="judge").accomplished is True  # a confident number...
    assert wrong.outcome == Run.Outcome.NOT_ACCOMPLISHED  # ...the wrong one
    failed = evaluated(make_finished_run(status=Run.Status.FAILED, expected_answer="4", output="4"))
    assert failed.outcome == Run.Outcome.NOT_ACCOMPLISHED  # no answer given: not done, whatever it said


def test_a_run_that_gives_up_is_in_the_review_queue_whatever_its_score(client, reviewer, judge_server):
    # A lenient judge: a high score, but it says the task was not done.
    judge_server.score, judge_server.accomplished = 0.95, False
    run = evaluated(gave_up_run())
    assert run.score >= 0.7  # above every threshold: only the outcome says something is wrong
    queued = {r.pk: r for r in selectors.review_queue()}
    assert run.pk in queued
    assert queued[run.pk].not_accomplished and not queued[run.pk].low_score and not queued[run.pk].disagreement
    client.force_login(reviewer)
    html = client.get(reverse("feedback-review-queue")).content.decode()
    row = html[html.index(f'id="review-run-{run.pk}"') :].split("</tr>")[0]
    assert '<span class="badge reason-not-accomplished">Not accomplished</span>' in row
    assert '<span class="badge outcome-not_accomplished">Not accomplished</span>' in row


def test_mining_counts_runs_that_give_up_as_failing_whatever_their_score(judge_server, settings):
    settings.STRATEGY_MIN_SUPPORT, settings.STRATEGY_MIN_LIFT = 5, 0.3
    settings.STRATEGY_LOW_SCORE = 0.7
    judge_server.score, judge_server.accomplished = 0.95, False
    gave_up = []
    for _ in range(6):
        run = gave_up_run()
        Step.objects.create(
            run=run, index=0, kind=Step.Kind.TOOL_CALL, tool_name="read_text_file", success=False,
            error="No such file: release-notes.txt", error_signature="release-notes-missing",
        )  # fmt: skip
        gave_up.append(evaluated(run))
    judge_server.accomplished = True
    good = [evaluated(summary_run()) for _ in range(6)]
    assert all(r.score >= settings.STRATEGY_LOW_SCORE and r.outcome == "not_accomplished" for r in gave_up)
    assert all(r.score >= settings.STRATEGY_LOW_SCORE and r.outcome == "accomplished" for r in good)

    pattern = {p.key: p for p in mine(window_days=30)}["error_signature:file_analysis:release-notes-missing"]
    assert (pattern.failing_with, pattern.failing_total, pattern.succeeding_total) == (6, 6, 6)
    assert pattern.evidence == sorted(r.pk for r in gave_up)


@pytest.mark.parametrize("behaviour", sorted(BAD_ACCOMPLISHED))
def test_the_llm_judge_s_accomplished_is_read_strictly(judge_server, behaviour):
    judge_server.behaviour = behaviour
    with pytest.raises(EvaluatorError, match="accomplished") as caught:
        judge_evaluator(make_finished_run(output="4"), {})
    assert caught.value.details["reply"].startswith('{"score": 0.9')
    # In the chain the judge is a failed evaluation, never a verdict: the reference decides.
    run = evaluated(make_finished_run(output="2 + 2 = 4", expected_answer="4"))
    judge = run.evaluations.get(kind="judge")
    assert judge.status == "failed" and judge.accomplished is None
    assert run.outcome == Run.Outcome.ACCOMPLISHED
    # A well-formed "false" is a verdict, kept as such.
    judge_server.behaviour, judge_server.accomplished = "ok", False
    assert judge_evaluator(make_finished_run(output="4"), {}).accomplished is False


def test_a_human_verdict_overrides_the_evaluators(client, reviewer, make_reviewer):
    run = evaluated(gave_up_run())
    client.force_login(reviewer)
    page = client.get(reverse("feedback-run-detail", args=[run.pk])).content.decode()
    assert 'name="outcome"' in page and '<option value="" selected>Leave it to the evaluators</option>' in page
    url = reverse("feedback-run-score", args=[run.pk])
    # The file was not there to be found: the reviewer says the answer did the right thing.
    client.post(url, {"score": "0.8", "outcome": "accomplished", "comment": "The file does not exist."})
    run.refresh_from_db()
    assert run.outcome == Run.Outcome.ACCOMPLISHED
    assert run.evaluations.get(kind="human").accomplished is True
    evaluate_run(run.pk, expected_round=2)  # a later automatic round does not override people
    run.refresh_from_db()
    assert run.outcome == Run.Outcome.ACCOMPLISHED
    second = make_reviewer("second-reviewer")
    client.force_login(second)
    client.post(url, {"score": "0.5", "outcome": ""})  # a score without a verdict changes nothing
    run.refresh_from_db()
    assert (run.score, run.outcome) == (0.5, Run.Outcome.ACCOMPLISHED)
    client.post(url, {"score": "0.1", "outcome": "not_accomplished"})  # the latest verdict wins
    run.refresh_from_db()
    assert run.outcome == Run.Outcome.NOT_ACCOMPLISHED
    response = client.post(url, {"score": "0.5", "outcome": "maybe"})
    assert response.status_code == 302 and run.evaluations.filter(kind="human").count() == 3  # refused, kept


def test_the_success_rate_counts_accomplished_runs_not_answered_ones(client, operator):
    noon = timezone.make_aware(datetime.combine(timezone.localdate() - timedelta(days=3), time(12)))
    evaluated(gave_up_run(created_at=noon))  # answered, not accomplished
    evaluated(summary_run(created_at=noon, expected_answer="/80 words/"))  # answered, accomplished
    evaluated(make_finished_run(status=Run.Status.FAILED, created_at=noon, kind=K.FILE_ANALYSIS))
    make_run(created_at=noon, status=Run.Status.RUNNING)  # not ended: left out
    tasks.daily_stats_refresh_task()  # beat: the closed days into the daily tables
    whole_day = Window(since=noon - timedelta(hours=12), until=noon + timedelta(hours=12))
    assert metrics.split_window(whole_day)[1:] == (noon.date(), noon.date() + timedelta(days=1))  # daily rows
    inside = Window(since=noon - timedelta(hours=1), until=noon + timedelta(hours=1))  # counted live
    for window in (whole_day, inside):
        summary = metrics.score_summary(window)
        assert (summary["runs"], summary["succeeded"], summary["accomplished"], summary["unknown"]) == (3, 2, 1, 0)
        assert summary["success_rate"] == pytest.approx(1 / 3)
    client.force_login(operator)
    html = client.get(reverse("feedback-metrics"), {"days": 7}).content.decode()
    assert '<div class="value" id="figure-success-rate">33 %</div>' in html
    assert '<span id="figure-accomplished">1 of 3 ended runs accomplished, 0 unknown</span>' in html


@pytest.mark.parametrize(
    ("task", "output", "status"),
    [
        (RELEASE_TASK, GAVE_UP, "succeeded"),
        (RELEASE_TASK, "Could not find the file release-notes.txt.", "succeeded"),
        ("What is the capital of Australia?", "I don't know.", "succeeded"),
        (TRIAGE_TASK, "I’m sorry, I cannot access the inbox.", "succeeded"),
        (TRIAGE_TASK, "I am unable to read the emails.", "succeeded"),
        (RELEASE_TASK, "Summarise release-notes.txt and count its words.", "succeeded"),  # an echo
        (RELEASE_TASK, "I will summarise release-notes.txt and count its words.", "succeeded"),  # an echo
        (TRIAGE_TASK, "", "succeeded"),
        (TRIAGE_TASK, "Done.", "succeeded"),
        ("What is 2 + 2?", "ok", "succeeded"),
        ("What is 2 + 2?", "", "failed"),
    ],
)
def test_the_offline_judge_scores_giving_up_echoes_and_empty_answers_low(task, output, status):
    verdict = offline_heuristic_judge(make_finished_run(text=task, output=output, status=status), {})
    assert verdict.score < 0.3 and verdict.accomplished is False
    assert verdict.feedback.startswith("Offline heuristic judge (no LLM): ")


@pytest.mark.parametrize(
    ("task", "output"),
    [
        ("What is (17 * 23 + 4) / 5?", "(17 * 23 + 4) / 5 = 79"),
        ("What is 2 + 2?", "4"),
        ("What is the capital of Australia?", "Canberra."),
        ("Summarise report.txt and count its words", SUMMARY),
        (
            TRIAGE_TASK,
            "Triaged 6 email(s); 2 urgent.\n- inbox/002-site-down.txt: outage — URGENT\n"
            "- inbox/005-locked-account.txt: account access — URGENT\n- inbox/001-invoice-twice.txt: billing",
        ),
        # Quoting someone who could not do something is not giving up.
        ("Summarise meeting-notes.md", "The notes say the team could not find a venue; the offsite moves to May."),
    ],
)
def test_the_offline_judge_scores_real_answers_high(task, output):
    verdict = offline_heuristic_judge(make_finished_run(text=task, output=output), {})
    assert verdict.score >= 0.7 and verdict.accomplished is True


def test_the_run_list_filters_and_shows_the_outcome(client, operator):
    done = evaluated(summary_run(expected_answer="/80 words/"))
    gave_up = evaluated(gave_up_run())
    waiting = make_finished_run(output="4")  # ended, not evaluated yet
    client.force_login(operator)
    url = reverse("feedback-run-list")
    html = client.get(url).content.decode()
    assert '<span class="badge outcome-accomplished">Accomplished</span>' in html
    assert '<span class="badge outcome-not_accomplished">Not accomplished</span>' in html
    assert '<span class="muted">Unknown</span>' in html
    for outcome, expected in (("accomplished", done), ("not_accomplished", gave_up), ("unknown", waiting)):
        listed = client.get(url, {"outcome": outcome}).content.decode()
        assert [r.pk for r in (done, gave_up, waiting) if f'id="run-{r.pk}"' in listed] == [expected.pk]


# --- mining's window ---------------------------------------------------------------------------
@pytest.fixture
def mining_thresholds(settings):
    settings.STRATEGY_MIN_SUPPORT, settings.STRATEGY_MIN_LIFT = 5, 0.3
    settings.STRATEGY_LOW_SCORE = 0.5


def _failing_history(*, n: int, days_ago: int, tag: str) -> list[Run]:
    """n failing file runs that miss a file then list the folder, judged vague, ``days_ago``."""
    runs = [
        add_run(status="failed", score=None, text=f"Summarise {tag}-{i}.txt please",
                calls=[("read_text_file", "No such file"), ("list_directory", "")], feedback="Too vague: no count.")
        for i in range(n)
    ]  # fmt: skip
    Run.objects.filter(pk__in=[r.pk for r in runs]).update(created_at=timezone.now() - timedelta(days=days_ago))
    return runs


def test_mining_s_window_is_explicit_and_none_means_all_history(mining_thresholds):
    old = _failing_history(n=6, days_ago=60, tag="archive")
    for _ in range(6):
        add_run(score=0.95, text="Summarise report.txt", calls=[("read_text_file", ""), ("analyze_text", "")])
    with pytest.raises(TypeError):
        mine()  # no silent default: the caller says which window
    with pytest.raises(ValueError, match="at least 1"):
        mine(window_days=0)
    assert mine(window_days=30) == []  # the failures are 60 days old
    everything = {p.key: p for p in mine(window_days=None)}
    error = everything["error_signature:file_analysis:sig-read_text_file-No such fi"]
    assert error.evidence == sorted(r.pk for r in old)
    assert (error.window_days, error.since) == (None, None)
    assert error.contrast()["window_days"] is None
    mine_and_propose(window_days=None)
    assert Strategy.objects.get(pattern_kind="error_signature").mined_over == {"days": None, "since": None}


def test_runs_and_steps_outside_the_window_never_contribute_and_the_window_is_recorded(
    mining_thresholds, client, reviewer
):
    recent = _failing_history(n=6, days_ago=2, tag="recent")
    # Long ago: more failures of the same kinds, and successes that show the same calls.
    _failing_history(n=9, days_ago=45, tag="archive")
    old_good = [
        add_run(score=0.95, text=f"Summarise archive-{i}.txt please",
                calls=[("read_text_file", "No such file"), ("list_directory", "")])
        for i in range(40)
    ]  # fmt: skip
    Run.objects.filter(pk__in=[r.pk for r in old_good]).update(created_at=timezone.now() - timedelta(days=45))
    for i in range(8):
        add_run(score=0.95, text=f"Summarise report-{i}.txt", calls=[("read_text_file", ""), ("analyze_text", "")])

    patterns = mine(window_days=30)
    # The recent successes call analyze_text, which the failures never did: a skipped tool too.
    assert {p.kind for p in patterns} == {"error_signature", "tool_sequence", "tool_skipped", "evaluator_feedback"}
    recent_ids = sorted(r.pk for r in recent)
    for pattern in patterns:
        assert pattern.evidence == recent_ids, pattern.key
        assert (pattern.failing_with, pattern.failing_total, pattern.succeeding_total) == (6, 6, 8), pattern.key
        assert pattern.succeeding_with == 0, pattern.key  # the old successes with the same calls are out
        assert pattern.window_days == 30
        assert timezone.now() - timedelta(days=30, minutes=1) < pattern.since < timezone.now() - timedelta(days=30)

    mine_and_propose(window_days=30)
    strategy = Strategy.objects.get(pattern_kind="error_signature")
    assert strategy.evidence_summary["window_days"] == 30
    since = datetime.fromisoformat(strategy.evidence_summary["since"])
    assert timezone.now() - timedelta(days=30, minutes=1) < since < timezone.now() - timedelta(days=30)
    event = StrategyEvent.objects.get(strategy=strategy, action="propose")
    assert event.reason.startswith("Mined from recurring failures over the last 30 day(s), since ")
    assert event.snapshot["evidence"]["window_days"] == 30
    client.force_login(reviewer)
    html = client.get(reverse("feedback-strategy-detail", args=[strategy.pk])).content.decode()
    local = timezone.localtime(since).strftime("%Y-%m-%d %H:%M")
    assert f'<dd id="mining-window">the last 30 days, since {local}</dd>' in html
