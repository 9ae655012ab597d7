"""The DailyRunStats rollups behind the metric trends: a run is added when it ends, a change to it
(a score, a re-run) adds its difference, and the rows always equal a recount; rebuilt by a
command; the partial days at a window's edges counted live."""

from datetime import UTC, date, datetime

import pytest
from django.core.management import call_command
from django.utils import timezone

from feedback import metrics, services, tasks
from feedback.metrics import Window
from feedback.models import DailyRunStats, DailyToolLatency, DailyToolStats, Run, Step, Task
from feedback.rollups import rollup_add

from .factories import make_finished_run, make_run

pytestmark = pytest.mark.django_db

K = Task.Kind


def at(day: int, hour: int = 12) -> datetime:
    return datetime(2026, 11, day, hour, tzinfo=UTC)


def stats(day: int, kind: str = K.ARITHMETIC) -> DailyRunStats:
    return DailyRunStats.objects.get(day=date(2026, 11, day), task_kind=kind)


def test_the_evaluation_task_counts_an_ended_run_and_its_score():
    run = make_run(created_at=at(2), status=Run.Status.SUCCEEDED, final_output="4")
    Step.objects.create(run=run, index=0, kind=Step.Kind.TOOL_CALL, tool_name="calculator", error_signature="A")
    tasks.run_evaluate_task(run.pk)  # what the worker runs once a run has ended
    run.refresh_from_db()
    row = stats(2)
    assert (row.runs, row.ended, row.succeeded, row.scored, row.errors) == (1, 1, 1, 1, 1)
    assert run.outcome == Run.Outcome.ACCOMPLISHED and (row.accomplished, row.judged) == (1, 1)
    assert row.score_sum == pytest.approx(run.score)


def test_a_human_score_is_counted_at_once(reviewer):
    run = make_finished_run(created_at=at(2), score=0.2)
    assert (stats(2).human_scored, stats(2).intervened) == (0, 0)
    services.run_add_human_score(run=run, user=reviewer, score=0.9, outcome=Run.Outcome.ACCOMPLISHED)
    row = stats(2)
    assert (row.human_scored, row.intervened, row.score_sum) == (1, 1, pytest.approx(0.9))
    assert (row.accomplished, row.judged) == (1, 1)  # the reviewer's verdict, counted at once


def test_a_rerun_of_a_run_and_a_cancel_are_counted_at_once(reviewer, monkeypatch):
    original = make_finished_run(created_at=at(2), status=Run.Status.FAILED)
    waiting = make_run(created_at=at(3), status=Run.Status.QUEUED)
    services.run_rerun(run=original, user=reviewer)
    services.run_cancel(run=waiting, user=reviewer)
    assert (stats(2).retried, stats(2).intervened) == (1, 1)
    assert (stats(3).runs, stats(3).cancelled, stats(3).ended) == (1, 1, 1)


def test_an_ended_run_is_counted_once_however_often_it_is_evaluated_or_added():
    run = make_run(created_at=at(2), status=Run.Status.SUCCEEDED, final_output="4")
    tasks.run_evaluate_task(run.pk)
    tasks.run_evaluate_task(run.pk)  # a redelivered evaluation
    assert rollup_add(run_id=run.pk) is False  # already counted
    assert (stats(2).runs, stats(2).ended, stats(2).scored) == (1, 1, 1)
    assert rollup_add(run_id=make_run(created_at=at(2), status=Run.Status.RUNNING).pk) is False  # not ended
    assert stats(2).runs == 1


def test_a_re_evaluation_adds_only_the_difference_it_makes(reviewer, settings):
    run = make_run(created_at=at(2), status=Run.Status.SUCCEEDED, final_output="4")
    tasks.run_evaluate_task(run.pk)
    first = Run.objects.get(pk=run.pk).score
    Run.objects.filter(pk=run.pk).update(final_output="I cannot do this task.")  # judged again, afresh
    services.run_reevaluate(run=run, user=reviewer)
    tasks.run_evaluate_task(run.pk, expected_round=2)
    second = Run.objects.get(pk=run.pk).score
    assert second < first
    assert (stats(2).runs, stats(2).scored, stats(2).score_sum) == (1, 1, pytest.approx(second))


def _rows() -> list[list[tuple]]:
    # Sums of floats added in another order differ in the last digits.
    tables = [
        DailyRunStats.objects.values_list("day", "task_kind", *DailyRunStats.COUNTS),
        DailyToolStats.objects.values_list("day", "task_kind", "tool_name", *DailyToolStats.COUNTS),
        DailyToolLatency.objects.values_list("day", "task_kind", "tool_name", "bucket", "calls"),
    ]
    return [sorted(tuple(round(v, 9) if isinstance(v, float) else v for v in row) for row in rows) for rows in tables]


def test_what_the_runs_add_always_equals_a_recount(reviewer, monkeypatch):
    """Runs ending, scored by people, re-run and cancelled, in any order: the rows built up by
    additions are the rows a recount from scratch gives."""
    import random

    rng = random.Random(5)
    runs = []
    for _ in range(40):
        kind = rng.choice([K.ARITHMETIC, K.GENERAL])
        status = rng.choice([Run.Status.SUCCEEDED, Run.Status.SUCCEEDED, Run.Status.FAILED, Run.Status.QUEUED])
        run = make_run(created_at=at(rng.randint(1, 3), rng.randint(0, 23)), kind=kind, status=status,
                       final_output="The answer is 4." if status == Run.Status.SUCCEEDED else "")  # fmt: skip
        if rng.random() < 0.5:
            signature = rng.choice(["", "a1", "b2"])
            Step.objects.create(run=run, index=0, kind=Step.Kind.TOOL_CALL, tool_name="calculator",
                                error_signature=signature, duration_ms=rng.randint(1, 500),
                                success=not signature, attempts=rng.choice([1, 1, 2, 3]))  # fmt: skip
            Step.objects.create(run=run, index=1, kind=Step.Kind.TOOL_CALL, tool_name=rng.choice(["a", "b"]),
                                duration_ms=rng.choice([None, 0, 7, 900]),
                                success=rng.choice([True, None]))  # fmt: skip
        runs.append(run)
    for run in rng.sample(runs, len(runs)):
        if run.status == Run.Status.QUEUED:
            services.run_cancel(run=run, user=reviewer)
        else:
            tasks.run_evaluate_task(run.pk)
    for run in rng.sample(runs, 15):
        if rng.random() < 0.5:
            services.run_add_human_score(run=run, user=reviewer, score=rng.random(),
                                         outcome=rng.choice(["", Run.Outcome.ACCOMPLISHED]))  # fmt: skip
        else:
            services.run_rerun(run=run, user=reviewer)
    added = _rows()
    call_command("rebuild_daily_stats")
    assert added == _rows() and all(len(rows) >= 2 for rows in added)


def test_the_safety_net_counts_runs_that_ended_without_being_counted():
    crashed = make_run(created_at=timezone.now(), status=Run.Status.FAILED)  # failed by a crash: no evaluation
    running = make_run(created_at=timezone.now(), status=Run.Status.RUNNING)
    tasks.daily_stats_refresh_recent_task()
    crashed.refresh_from_db()
    running.refresh_from_db()
    assert crashed.counted_at is not None and running.counted_at is None
    row = DailyRunStats.objects.get(day=timezone.localdate())
    assert (row.runs, row.ended) == (1, 1)


def test_the_rebuild_command_is_idempotent_and_forgets_deleted_runs():
    make_finished_run(created_at=at(1), score=0.5)
    gone = make_finished_run(created_at=at(2), score=0.5)
    call_command("rebuild_daily_stats")
    call_command("rebuild_daily_stats")
    assert DailyRunStats.objects.count() == 2
    gone.delete()
    call_command("rebuild_daily_stats")
    assert list(DailyRunStats.objects.values_list("day", flat=True)) == [date(2026, 11, 1)]


def test_whole_days_come_from_rollups_and_the_rest_is_counted_live():
    make_finished_run(created_at=at(1, 20), score=1.0)  # in the partial first day
    make_finished_run(created_at=at(2, 9), score=0.5)  # a whole day
    window = Window(since=at(1, 18), until=at(3, 6))
    live, first, last = metrics.split_window(window)
    assert (first, last) == (date(2026, 11, 2), date(2026, 11, 3))
    assert [(w.since, w.until, w.counted) for w in live] == [
        (at(2, 0), at(3, 0), False),  # the whole days' runs not in the rollups yet
        (at(1, 18), at(2, 0), None),  # the partial edges: every run
        (at(3, 0), at(3, 6), None),
    ]
    # Ended but not counted yet (their evaluation still to come): counted live, at once.
    late_edge = make_run(created_at=at(3, 5), status=Run.Status.SUCCEEDED, score=0.0)
    not_yet = make_run(created_at=at(2, 10), status=Run.Status.SUCCEEDED, score=0.0)
    assert [r["runs"] for r in metrics.score_trend(window)] == [1, 2, 1]
    assert metrics.score_summary(window)["avg_score"] == pytest.approx(1.5 / 4)
    rollup_add(run_id=not_yet.pk)  # now from the rollup: the same figures
    rollup_add(run_id=late_edge.pk)
    assert stats(2).runs == 2
    assert [r["runs"] for r in metrics.score_trend(window)] == [1, 2, 1]
    assert metrics.score_summary(window)["avg_score"] == pytest.approx(1.5 / 4)


def test_a_window_inside_one_day_is_counted_live():
    make_run(created_at=at(2, 10), status=Run.Status.SUCCEEDED, score=0.4)
    window = Window(since=at(2, 8), until=at(2, 16))
    assert metrics.split_window(window) == ([window], None, None)
    assert metrics.score_summary(window)["avg_score"] == pytest.approx(0.4)
