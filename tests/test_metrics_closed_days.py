"""Metrics from closed days: each closed day's daily rows are the live count of that day, rebuilt
by beat when the day closes and again when its runs change later (a reviewer's score, a re-run,
a run that ends after its day closed); today is counted live and never written; a window reads
the rebuilt days from the tables and counts the rest live, with the same figures."""

import random
from datetime import date, datetime, timedelta
from datetime import time as dt_time

import pytest
from django.core.management import call_command
from django.utils import timezone

from feedback import metrics, services, tasks
from feedback.metrics import Window
from feedback.metrics.daily import changed_days, daily_stats_refresh, days_due, rebuild
from feedback.metrics.tools import add_tool_counts, tool_call_counts
from feedback.models import (
    DailyRunStats,
    DailyToolLatency,
    DailyToolStats,
    Evaluation,
    Run,
    Step,
    Task,
    ToolConfirmation,
)

from .factories import make_finished_run, make_run

pytestmark = pytest.mark.django_db

K = Task.Kind
S = Run.Status
SIGNATURES = ("sig-a", "sig-b", "sig-c")


def midnight(day: date) -> datetime:
    return timezone.make_aware(datetime.combine(day, dt_time.min))


def days_ago(n: int, hour: float = 12) -> datetime:
    """``hour`` o'clock ``n`` days ago; today, as far into the hours gone by as ``hour`` is into 24."""
    today = midnight(timezone.localdate())
    if n == 0:
        return today + (timezone.now() - today) * (hour / 24)
    return midnight(timezone.localdate() - timedelta(days=n)) + timedelta(hours=hour)


def day_of(run: Run) -> date:
    return timezone.localdate(run.created_at)


def day_window(day: date, kind: str = "") -> Window:
    return Window(since=midnight(day), until=midnight(day + timedelta(days=1)), kind=kind)


def add_steps(run: Run, rng: random.Random, count: int) -> None:
    """Tool calls (some failing with a signature, some refused by a guardrail or a reviewer),
    thoughts and the odd model error, with durations and retries."""
    start = run.steps.count()
    steps = []
    for i in range(count):
        roll = rng.random()
        if roll < 0.1:
            steps.append(
                Step(
                    run=run,
                    index=start + i,
                    kind=Step.Kind.MODEL_ERROR,
                    success=False,
                    error_class="MalformedReply",
                    error="no JSON",
                )
            )
            continue
        if roll < 0.2:
            steps.append(Step(run=run, index=start + i, kind=Step.Kind.THOUGHT, thought="thinking"))
            continue
        failed = roll < 0.5
        error_class = rng.choice(["ToolError", "ToolError", "GuardrailRefused", "Refused"]) if failed else ""
        steps.append(
            Step(
                run=run,
                index=start + i,
                kind=Step.Kind.TOOL_CALL,
                tool_name=rng.choice(["calculator", "read_text_file"]),
                success=not failed,
                error_class=error_class,
                error="boom" if failed else "",
                error_signature=f"{error_class}-{rng.choice(SIGNATURES)}" if failed else "",
                duration_ms=None if rng.random() < 0.1 else int(rng.lognormvariate(4, 1)),
                attempts=rng.choice([1, 1, 2]),
            )
        )
    Step.objects.bulk_create(steps)


def history(rng: random.Random, days: range, per_day: int = 6) -> list[Run]:
    """Production runs of every status on each of ``days`` (days ago), with steps, confirmations,
    human scores and re-runs; and an experiment run a day, which no metric counts."""
    runs = []
    for n in days:
        for i in range(per_day):
            status = rng.choice([S.SUCCEEDED, S.SUCCEEDED, S.FAILED, S.CANCELLED, S.RUNNING, S.QUEUED])
            ended = status in metrics.ENDED
            run = make_run(
                created_at=days_ago(n, hour=1 + i * 3),
                kind=rng.choice([K.ARITHMETIC, K.GENERAL]),
                status=status,
                score=round(rng.random(), 3) if ended and rng.random() < 0.8 else None,
                outcome=rng.choice(list(Run.Outcome.values)) if ended else Run.Outcome.UNKNOWN,
                cost=rng.choice([None, 0.01, 0.02]) if ended else None,
                finished_at=days_ago(n, hour=2 + i * 3) if ended else None,
            )
            add_steps(run, rng, rng.randint(0, 8))
            if rng.random() < 0.2:
                ToolConfirmation.objects.create(run=run, turn=1, tool_call_id=f"c{run.pk}", tool_name="send_email")
            runs.append(run)
        experiment = make_run(
            created_at=days_ago(n, hour=23),
            status=S.SUCCEEDED,
            score=1.0,
            purpose=Run.Purpose.EXPERIMENT,
            finished_at=days_ago(n, hour=23),
        )
        add_steps(experiment, rng, 5)
    return runs


def live_figures(day: date) -> dict:
    """What the live queries count for ``day``, per task kind, in the shape of the daily rows."""
    window = day_window(day)
    runs: dict[str, dict] = {}
    for row in [*metrics.run_counts(window, by=("task_kind",)), *metrics.error_counts(window, by=("task_kind",))]:
        runs.setdefault(row.pop("task_kind"), dict.fromkeys(DailyRunStats.COUNTS, 0)).update(
            {name: value or 0 for name, value in row.items()}
        )
    tools: dict = {}
    add_tool_counts(
        tools, tool_call_counts(window, by=("task_kind", "tool_name")), key=lambda r: (r["task_kind"], r["tool_name"])
    )
    return {
        "runs": {kind: {name: pytest.approx(value) for name, value in counts.items()} for kind, counts in runs.items()},
        "tools": {key: {name: c[name] for name in DailyToolStats.COUNTS} for key, c in tools.items()},
        "latency": {(*key, bucket): calls for key, c in tools.items() for bucket, calls in c["latency"].items()},
    }


def daily_rows(day: date) -> dict:
    return {
        "runs": {
            row["task_kind"]: {name: row[name] for name in DailyRunStats.COUNTS}
            for row in DailyRunStats.objects.filter(day=day).values()
        },
        "tools": {
            (row["task_kind"], row["tool_name"]): {name: row[name] for name in DailyToolStats.COUNTS}
            for row in DailyToolStats.objects.filter(day=day).values()
        },
        "latency": {
            (kind, tool, bucket): calls
            for kind, tool, bucket, calls in DailyToolLatency.objects.filter(day=day).values_list(
                "task_kind", "tool_name", "bucket", "calls"
            )
        },
    }


def test_a_closed_days_rebuilt_rows_equal_the_live_count_of_that_day():
    rng = random.Random(3)
    history(rng, range(1, 6))
    for run in rng.sample(list(Run.objects.filter(status__in=metrics.ENDED)), 4):
        Run.objects.create(task=run.task, task_kind=run.task_kind, retry_of=run, created_at=run.created_at)
    tasks.daily_stats_refresh_task()  # what beat runs
    for n in range(1, 6):
        day = timezone.localdate() - timedelta(days=n)
        rows = daily_rows(day)
        assert rows["runs"] and rows["tools"] and rows["latency"], day
        assert rows == live_figures(day), day
        # And a window of that day reads them: the same figures as counting it live.
        assert metrics.split_window(day_window(day))[1:] == (day, day + timedelta(days=1))
    assert sum(r.runs for r in DailyRunStats.objects.all()) == 5 * 6 + 4  # no experiment run among them


def test_today_is_counted_live_and_never_written():
    rng = random.Random(4)
    history(rng, range(0, 3))
    tasks.daily_stats_refresh_task()
    today = timezone.localdate()
    assert not DailyRunStats.objects.filter(day=today).exists() and not DailyToolStats.objects.filter(day=today)
    assert metrics.built_days() == (today - timedelta(days=2), today)
    week = Window.last(7)
    live, first, last = metrics.split_window(week)
    assert (first, last) == (today - timedelta(days=2), today)
    assert [(w.since, w.until) for w in live] == [(week.since, midnight(first)), (midnight(today), week.until)]
    counts = {row["period"]: row for row in metrics.period_counts(week)}
    assert (
        counts[today]["runs"] == 6
        and counts[today]["errors"]
        == Step.objects.filter(
            metrics.ERROR_STEP, run__created_at__gte=midnight(today), run__purpose=Run.Purpose.PRODUCTION
        ).count()
    )
    assert rebuild(since_day=today, until_day=today + timedelta(days=1)) == 0  # an open day is not rebuilt


def test_a_late_change_to_a_closed_day_is_picked_up_by_the_next_rebuild(reviewer):
    scored = make_finished_run(created_at=days_ago(3), score=0.2, outcome=Run.Outcome.NOT_ACCOMPLISHED)
    going = make_run(created_at=days_ago(3, hour=20), status=S.RUNNING)
    waiting = make_run(created_at=days_ago(2), status=S.QUEUED)
    rerun = make_finished_run(created_at=days_ago(2, hour=14), status=S.FAILED)
    untouched = make_finished_run(created_at=days_ago(5), score=0.5)
    tasks.daily_stats_refresh_task()
    before = {row.day: row.refreshed_at for row in DailyRunStats.objects.all()}
    row = DailyRunStats.objects.get(day=day_of(scored))
    assert (row.runs, row.ended, row.human_scored, row.accomplished, row.score_sum) == (2, 1, 0, 0, pytest.approx(0.2))

    # A week later, as it were: a reviewer's score and verdict, a run that was still going ends
    # with a failed tool call, a waiting run is cancelled, a failed one is asked for again.
    services.run_add_human_score(run=scored, user=reviewer, score=0.9, outcome=Run.Outcome.ACCOMPLISHED)
    Step.objects.create(
        run=going,
        index=0,
        kind=Step.Kind.TOOL_CALL,
        tool_name="calculator",
        success=False,
        error_class="ToolError",
        error_signature="sig-late",
        duration_ms=30,
    )
    Run.objects.filter(pk=going.pk).update(status=S.FAILED, finished_at=timezone.now())
    services.run_cancel(run=waiting, user=reviewer)
    services.run_rerun(run=rerun, user=reviewer)
    assert DailyRunStats.objects.get(day=day_of(scored)).human_scored == 0  # until beat rebuilds

    tasks.daily_stats_refresh_task()
    for day in (day_of(scored), day_of(waiting)):
        assert daily_rows(day) == live_figures(day)
    row = DailyRunStats.objects.get(day=day_of(scored))
    assert (row.ended, row.human_scored, row.accomplished, row.errors) == (2, 1, 1, 1)
    assert (row.score_sum, DailyToolStats.objects.get(day=row.day).calls) == (pytest.approx(0.9), 1)
    row = DailyRunStats.objects.get(day=day_of(waiting))
    assert (row.cancelled, row.retried, row.intervened) == (1, 1, 2)
    # The day nothing happened to was not counted again, nor is it due.
    assert DailyRunStats.objects.get(day=day_of(untouched)).refreshed_at == before[day_of(untouched)]
    assert not [r for r in days_due() if r[0] <= day_of(untouched) < r[1]]


def test_a_re_evaluation_of_a_run_of_a_closed_day_is_picked_up(reviewer):
    run = make_finished_run(created_at=days_ago(2), output="4")
    tasks.run_evaluate_task(run.pk)
    tasks.daily_stats_refresh_task()
    first = DailyRunStats.objects.get(day=day_of(run)).score_sum
    Run.objects.filter(pk=run.pk).update(final_output="I cannot do this task.")  # judged again, afresh
    services.run_reevaluate(run=run, user=reviewer)
    tasks.run_evaluate_task(run.pk, expected_round=2)
    tasks.daily_stats_refresh_task()
    second = Run.objects.get(pk=run.pk).score
    assert second < first and DailyRunStats.objects.get(day=day_of(run)).score_sum == pytest.approx(second)


def test_a_run_ending_days_later_changes_every_day_it_spanned():
    # An earlier run still going makes the same error as a later run already counted: the later
    # run's error becomes a repeated one, on the later run's own day.
    earlier = make_run(created_at=days_ago(4), status=S.RUNNING)
    later = make_finished_run(created_at=days_ago(2))
    Step.objects.create(
        run=later,
        index=0,
        kind=Step.Kind.TOOL_CALL,
        tool_name="calculator",
        success=False,
        error_class="ToolError",
        error_signature="sig-x",
    )
    tasks.daily_stats_refresh_task()
    assert DailyRunStats.objects.get(day=day_of(later)).repeated_errors == 0
    Step.objects.create(
        run=earlier,
        index=0,
        kind=Step.Kind.TOOL_CALL,
        tool_name="calculator",
        success=False,
        error_class="ToolError",
        error_signature="sig-x",
    )
    Run.objects.filter(pk=earlier.pk).update(status=S.FAILED, finished_at=timezone.now())
    tasks.daily_stats_refresh_task()
    assert DailyRunStats.objects.get(day=day_of(later)).repeated_errors == 1
    assert daily_rows(day_of(later)) == live_figures(day_of(later))


def test_the_days_that_closed_since_the_newest_rebuilt_one_are_rebuilt_oldest_first():
    for n in (6, 5, 3, 1):
        make_finished_run(created_at=days_ago(n), score=0.5)
    today = timezone.localdate()
    rebuild(since_day=today - timedelta(days=6), until_day=today - timedelta(days=4))  # as of four days ago
    assert metrics.built_days() == (today - timedelta(days=6), today - timedelta(days=4))
    # The days that closed since, from the first with runs (day 4 has none); today stays open.
    assert days_due() == [(today - timedelta(days=3), today)]
    daily_stats_refresh()
    assert metrics.built_days() == (today - timedelta(days=6), today)
    assert sorted(DailyRunStats.objects.values_list("day", flat=True)) == [
        today - timedelta(days=n) for n in (6, 5, 3, 1)
    ]


def test_a_first_rebuild_of_a_long_history_goes_on_where_it_stopped_and_the_figures_never_change():
    rng = random.Random(9)
    for n in range(0, 80, 3):
        # Sums of quarters are exact in any order: the figures compare as equal, not nearly.
        run = make_finished_run(created_at=days_ago(n), score=rng.choice([0, 0.25, 0.5, 1]), cost=0.25)
        add_steps(run, rng, 3)
    window = Window.last(90)
    live = (metrics.period_counts(window), metrics.tool_stats(window), metrics.cost_by_kind(window))
    today = timezone.localdate()
    every_closed_day = (today - timedelta(days=78), today - timedelta(days=2))  # the first run's to the last's
    runs = 0
    while metrics.built_days() != every_closed_day:
        daily_stats_refresh(seconds=0)  # one range a run, as when the time budget runs out
        runs += 1
        # However far it got, the tables hold a contiguous span and the figures are the same.
        assert (metrics.period_counts(window), metrics.tool_stats(window), metrics.cost_by_kind(window)) == live
        assert runs < 10
    assert runs >= 3  # a range at a time
    assert metrics.split_window(window)[1:] == every_closed_day


def test_the_rebuild_command_is_idempotent_and_forgets_deleted_runs():
    kept = make_finished_run(created_at=days_ago(4), score=0.5)
    gone = make_finished_run(created_at=days_ago(2), score=0.5)
    Step.objects.create(run=gone, index=0, kind=Step.Kind.TOOL_CALL, tool_name="calculator", duration_ms=5)
    call_command("rebuild_daily_stats")
    call_command("rebuild_daily_stats")
    assert DailyRunStats.objects.count() == 2 and DailyToolStats.objects.count() == 1
    gone.delete()  # a deletion is no change beat sees: the command recounts everything
    call_command("rebuild_daily_stats")
    assert list(DailyRunStats.objects.values_list("day", flat=True)) == [day_of(kept)]
    assert not DailyToolStats.objects.exists() and not DailyToolLatency.objects.exists()
    call_command("rebuild_daily_stats", "--days", "1")
    assert DailyRunStats.objects.count() == 1


def test_whole_days_come_from_the_daily_tables_and_the_rest_is_counted_live():
    first = midnight(timezone.localdate() - timedelta(days=4))
    make_finished_run(created_at=first + timedelta(hours=20), score=1.0)  # in the partial first day
    make_finished_run(created_at=first + timedelta(days=1, hours=9), score=0.5)  # a whole day
    make_finished_run(created_at=first + timedelta(days=2, hours=5), score=0.0)  # in the partial last day
    window = Window(since=first + timedelta(hours=18), until=first + timedelta(days=2, hours=6))
    expected = ([1, 1, 1], pytest.approx(0.5))
    assert metrics.split_window(window) == ([window], None, None)  # nothing rebuilt yet: all live
    assert ([r["runs"] for r in metrics.score_trend(window)], metrics.score_summary(window)["avg_score"]) == expected
    tasks.daily_stats_refresh_task()
    live, whole, last = metrics.split_window(window)
    assert (whole, last) == ((first + timedelta(days=1)).date(), (first + timedelta(days=2)).date())
    assert [(w.since, w.until) for w in live] == [
        (window.since, first + timedelta(days=1)),
        (first + timedelta(days=2), window.until),
    ]
    assert ([r["runs"] for r in metrics.score_trend(window)], metrics.score_summary(window)["avg_score"]) == expected
    inside = Window(since=first + timedelta(hours=8), until=first + timedelta(hours=22))
    assert metrics.split_window(inside) == ([inside], None, None)
    assert metrics.score_summary(inside)["avg_score"] == pytest.approx(1.0)


def test_an_evaluation_written_after_a_closed_days_rebuild_is_found_by_the_change_query(reviewer):
    run = make_finished_run(created_at=days_ago(3), score=0.4)
    tasks.daily_stats_refresh_task()
    assert changed_days(timezone.now() - timedelta(minutes=1)) == {}
    Evaluation.objects.create(run=run, evaluator="human", kind=Evaluation.Kind.HUMAN, score=1.0, author=reviewer)
    assert list(changed_days(timezone.now() - timedelta(minutes=1))) == [day_of(run)]
