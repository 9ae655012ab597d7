"""The DailyRunStats rollups behind the metric trends: kept current when a run ends, is scored,
retried or cancelled; rebuilt by a command; the partial days at a window's edges counted live."""

from datetime import UTC, date, datetime

import pytest
from django.core.management import call_command

from feedback import metrics, services, tasks
from feedback.metrics import Window
from feedback.models import DailyRunStats, Run, Step, Task
from feedback.rollups import daily_stats_refresh_run

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


def test_a_rerun_and_a_cancel_queue_a_refresh_of_the_original_day(
    operator, reviewer, django_capture_on_commit_callbacks, monkeypatch
):
    original = make_finished_run(created_at=at(2), status=Run.Status.FAILED)
    waiting = make_run(created_at=at(3), status=Run.Status.QUEUED)
    sent = []
    monkeypatch.setattr(tasks.daily_stats_refresh_task, "delay", sent.append)
    monkeypatch.setattr(tasks.run_execute_task, "delay", lambda run_id: None)
    with django_capture_on_commit_callbacks(execute=True):
        services.run_rerun(run=original, user=reviewer)
        services.run_cancel(run=waiting, user=reviewer)
    assert sent == [original.pk, waiting.pk]
    for run_id in sent:
        tasks.daily_stats_refresh_task(run_id)
    assert (stats(2).retried, stats(2).intervened) == (1, 1)
    assert (stats(3).cancelled, stats(3).ended) == (1, 1)


def test_the_rebuild_command_is_idempotent_and_forgets_deleted_runs():
    make_finished_run(created_at=at(1), score=0.5)
    gone = make_finished_run(created_at=at(2), score=0.5)
    call_command("rebuild_daily_stats")
    call_command("rebuild_daily_stats")
    assert DailyRunStats.objects.count() == 2
    gone.delete()
    call_command("rebuild_daily_stats")
    assert list(DailyRunStats.objects.values_list("day", flat=True)) == [date(2026, 11, 1)]


def test_whole_days_come_from_rollups_and_partial_edges_are_counted_live():
    make_finished_run(created_at=at(1, 20), score=1.0)  # in the partial first day
    make_finished_run(created_at=at(2, 9), score=0.5)  # a whole day
    window = Window(since=at(1, 18), until=at(3, 6))
    edges, first, last = metrics.split_window(window)
    assert (first, last) == (date(2026, 11, 2), date(2026, 11, 3))
    assert [(e.since, e.until) for e in edges] == [(at(1, 18), at(2, 0)), (at(3, 0), at(3, 6))]
    # Written straight to the table, past every refresh: only the live edge sees them at once.
    late_edge = make_run(created_at=at(3, 5), status=Run.Status.SUCCEEDED, score=0.0)
    make_run(created_at=at(2, 10), status=Run.Status.SUCCEEDED, score=0.0)
    assert [r["runs"] for r in metrics.score_trend(window)] == [1, 1, 1]
    daily_stats_refresh_run(run_id=late_edge.pk)  # its day is an edge here: read live, not from the rollup
    call_command("rebuild_daily_stats")
    assert [r["runs"] for r in metrics.score_trend(window)] == [1, 2, 1]
    assert metrics.score_summary(window)["avg_score"] == pytest.approx(1.5 / 4)


def test_a_window_inside_one_day_is_counted_live():
    make_run(created_at=at(2, 10), status=Run.Status.SUCCEEDED, score=0.4)
    window = Window(since=at(2, 8), until=at(2, 16))
    assert metrics.split_window(window) == ([window], None, None)
    assert metrics.score_summary(window)["avg_score"] == pytest.approx(0.4)
