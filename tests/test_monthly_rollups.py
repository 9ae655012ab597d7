"""The monthly tool rollups (MonthlyToolStats, MonthlyToolLatency) that long windows read: a
monthly row is always the sum of its month's daily rows, whether runs are added as they end,
changed later or recounted, so a window read from whole months plus daily edges gives exactly
the figures of the daily rows, at every kind of edge."""

import importlib
import itertools
import random
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta

import pytest
from django.apps import apps
from django.core.management import call_command
from django.db import connection
from django.db.models import DateField, Sum
from django.db.models.functions import Trunc
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from feedback import metrics, services, tasks, tool_metrics
from feedback.metrics import Window
from feedback.models import DailyToolLatency, DailyToolStats, MonthlyToolLatency, MonthlyToolStats, Run, Step, Task
from feedback.rollups import daily_stats_rebuild, monthly_stats_rebuild, rollup_add

from .factories import make_run
from .test_tool_rollups import TOOLS, add_tool_steps, counted_directly

pytestmark = pytest.mark.django_db

K = Task.Kind
KINDS = (K.ARITHMETIC, K.FILE_ANALYSIS, K.EMAIL_TRIAGE)


def monthly_rows() -> tuple[list[tuple], list[tuple]]:
    stats = MonthlyToolStats.objects.values_list("month", "task_kind", "tool_name", *MonthlyToolStats.COUNTS)
    latency = MonthlyToolLatency.objects.values_list("month", "task_kind", "tool_name", "bucket", "calls")
    return sorted(stats), sorted(latency)


def daily_sums() -> tuple[list[tuple], list[tuple]]:
    """What the monthly rows must be: the daily rows added up per month."""
    month = Trunc("day", "month", output_field=DateField())
    stats = (
        DailyToolStats.objects.annotate(month=month)
        .values_list("month", "task_kind", "tool_name")
        .annotate(*[Sum(name) for name in MonthlyToolStats.COUNTS])
        .order_by()
    )
    latency = (
        DailyToolLatency.objects.annotate(month=month)
        .values_list("month", "task_kind", "tool_name", "bucket")
        .annotate(Sum("calls"))
        .order_by()
    )
    return sorted(stats), sorted(latency)


def ended_run(rng: random.Random, created_at: datetime, kind: str) -> Run:
    """A run with tool calls that has ended, counted as the worker counts it (steps first)."""
    run = make_run(created_at=created_at, kind=kind, status=Run.Status.SUCCEEDED, final_output="4", score=0.5)
    add_tool_steps(run, rng, rng.randint(2, 8))
    rollup_add(run_id=run.pk)
    return run


@pytest.fixture
def months():
    """Runs from 25 August to 3 December 2026 (four month boundaries), every ~20 hours, of three
    kinds, counted as they end."""
    rng = random.Random(17)
    moment = datetime(2026, 8, 25, 5, tzinfo=UTC)
    while moment < datetime(2026, 12, 3, 20, tzinfo=UTC):
        ended_run(rng, moment + timedelta(minutes=rng.randrange(60)), rng.choice(KINDS))
        moment += timedelta(hours=20)
    return rng


def test_runs_ending_add_to_the_month_as_to_the_day(months):
    added = monthly_rows()
    assert added == daily_sums()
    assert {row[0] for row in added[0]} == {date(2026, m, 1) for m in (8, 9, 10, 11, 12)}
    call_command("rebuild_daily_stats")  # a recount from scratch agrees with the additions
    assert monthly_rows() == added


def test_later_changes_and_recounts_keep_the_months_the_sums_of_their_days(months, reviewer):
    runs = list(Run.objects.order_by("?")[:12])
    for run in runs[:4]:
        services.run_add_human_score(run=run, user=reviewer, score=0.9)
    for run in runs[4:8]:
        services.run_rerun(run=run, user=reviewer)
    # Steps written past the hooks, then a recount of a few days across a month boundary.
    for run in Run.objects.filter(created_at__date__range=(date(2026, 9, 29), date(2026, 10, 2))):
        add_tool_steps(run, months, 3)
    daily_stats_rebuild(since_day=date(2026, 9, 30), until_day=date(2026, 10, 2))
    assert monthly_rows() == daily_sums()
    # A recount of one kind's days leaves the other kinds' months alone, and keeps the sums.
    run = Run.objects.filter(task_kind=K.GENERAL).first() or ended_run(
        months, datetime(2026, 10, 5, tzinfo=UTC), K.GENERAL
    )
    Step.objects.create(run=run, index=999, kind=Step.Kind.TOOL_CALL, tool_name="calculator", duration_ms=3)
    daily_stats_rebuild(since_day=date(2026, 10, 5), until_day=date(2026, 10, 6), kind=K.GENERAL)
    assert monthly_rows() == daily_sums()
    tasks.daily_stats_refresh_recent_task()  # the beat's safety net
    assert monthly_rows() == daily_sums()


def test_the_migration_fills_the_months_from_the_existing_days(months):
    expected = monthly_rows()
    MonthlyToolStats.objects.all().delete()
    MonthlyToolLatency.objects.all().delete()
    importlib.import_module("feedback.migrations.0024_monthly_tool_rollups").fill_from_daily_rows(apps, None)
    assert monthly_rows() == expected
    MonthlyToolLatency.objects.all().delete()
    monthly_stats_rebuild(since_day=date(2026, 8, 31), until_day=date(2026, 12, 2))  # every month it touches
    assert monthly_rows() == expected


def _from_daily_rows_only(monkeypatch, window: Window) -> list[dict]:
    # Patched where whole_periods looks it up: the re-export in feedback.metrics is another name.
    monkeypatch.setattr("feedback.metrics.window.whole_months", lambda first, last: None)
    try:
        with CaptureQueriesContext(connection) as queries:
            figures = tool_metrics.tool_stats(window)
    finally:
        monkeypatch.undo()
    # A patch that missed would read the monthly rows on both sides, and they would agree anyway.
    monthly = (MonthlyToolStats._meta.db_table, MonthlyToolLatency._meta.db_table)
    assert not [q["sql"] for q in queries if any(f'"{table}"' in q["sql"] for table in monthly)]
    return figures


EDGES = [
    # (since, until): mid-month to mid-month, on a month's first midnight, within one month,
    # a partial first day, ending at a month's first midnight, and a single whole month.
    (datetime(2026, 8, 27, tzinfo=UTC), datetime(2026, 12, 2, 18, tzinfo=UTC)),
    (datetime(2026, 9, 1, tzinfo=UTC), datetime(2026, 11, 17, 6, 30, tzinfo=UTC)),
    (datetime(2026, 9, 3, tzinfo=UTC), datetime(2026, 9, 29, 12, tzinfo=UTC)),
    (datetime(2026, 8, 31, 13, 15, tzinfo=UTC), datetime(2026, 10, 31, 23, tzinfo=UTC)),
    (datetime(2026, 9, 15, 9, tzinfo=UTC), datetime(2026, 11, 1, tzinfo=UTC)),
    (datetime(2026, 10, 1, tzinfo=UTC), datetime(2026, 11, 1, tzinfo=UTC)),
]


def test_windows_of_whole_months_and_daily_edges_give_the_daily_rows_figures(months, monkeypatch):
    for (since, until), kind in itertools.product(EDGES, ["", K.FILE_ANALYSIS]):
        window = Window(since=since, until=until, kind=kind)
        from_months = tool_metrics.tool_stats(window)
        assert from_months == _from_daily_rows_only(monkeypatch, window)  # exactly: the same integers
        exact = counted_directly(window)  # and the steps themselves agree
        assert {row["tool_name"]: (row["calls"], row["succeeded"], row["retries"]) for row in from_months} == {
            tool: (row["calls"], row["succeeded"], row["retries"]) for tool, row in exact.items()
        }
        for row in from_months:
            assert row["avg_ms"] == pytest.approx(exact[row["tool_name"]]["avg_ms"], rel=1e-12)
            assert row["p95_ms"] == pytest.approx(exact[row["tool_name"]]["p95_ms"], rel=0.05)
        assert from_months and {row["tool_name"] for row in from_months} <= set(TOOLS)


def test_whole_months_are_those_wholly_inside_the_days():
    assert metrics.whole_months(date(2026, 8, 27), date(2026, 12, 2)) == (date(2026, 9, 1), date(2026, 12, 1))
    assert metrics.whole_months(date(2026, 9, 1), date(2026, 10, 1)) == (date(2026, 9, 1), date(2026, 10, 1))
    assert metrics.whole_months(date(2026, 12, 15), date(2027, 2, 1)) == (date(2027, 1, 1), date(2027, 2, 1))
    assert metrics.whole_months(date(2026, 9, 2), date(2026, 10, 31)) is None


def test_a_year_reads_its_tools_in_a_fixed_few_queries(months, django_assert_max_num_queries):
    window = Window(since=datetime(2025, 12, 9, tzinfo=UTC), until=datetime(2026, 12, 9, 10, tzinfo=UTC))
    with django_assert_max_num_queries(7):  # stats and latency, months and days; three live edges
        tool_metrics.tool_stats(window)


# --- the current day -----------------------------------------------------------------------------
def test_a_window_to_now_reads_todays_counted_runs_from_the_rollups_with_the_same_figures(monkeypatch, reviewer):
    """Today's counted runs come from today's rollup rows, its uncounted ones (still going, or
    not evaluated yet) are counted live: the figures are those of a live count of the day."""
    rng = random.Random(23)
    now = timezone.now()
    moments = [now - timedelta(minutes=m) for m in (1, 3, 30, 90, 300)] + [now - timedelta(days=d) for d in (1, 2, 6)]
    for moment in moments:
        for kind in (K.ARITHMETIC, K.GENERAL):
            run = ended_run(rng, moment, kind)
            Step.objects.create(run=run, index=900, kind=Step.Kind.TOOL_CALL, tool_name="calculator",
                                error_signature=rng.choice(["a1", "b2", "c3"]), duration_ms=5)  # fmt: skip
    for minutes in (0, 2):  # going, with tool calls and errors
        going = make_run(created_at=now - timedelta(minutes=minutes), status=Run.Status.RUNNING)
        add_tool_steps(going, rng, 5)
        Step.objects.create(run=going, index=99, kind=Step.Kind.TOOL_CALL, tool_name="read_text_file",
                            error_signature="a1", duration_ms=12)  # fmt: skip
    make_run(created_at=now - timedelta(minutes=4), status=Run.Status.FAILED)  # ended, not evaluated yet
    # The error steps were written past the hooks: the days recounted, today's included.
    daily_stats_rebuild(
        since_day=timezone.localdate(now) - timedelta(days=8), until_day=timezone.localdate(now) + timedelta(days=1)
    )
    services.run_add_human_score(run=Run.objects.filter(created_at__gte=now - timedelta(minutes=2)).first(),
                                 user=reviewer, score=0.1)  # fmt: skip
    for days, kind in ((7, ""), (1, K.GENERAL), (30, "")):
        window = Window.last(days, kind=kind)
        live = replace(window, to_now=False)  # the current day counted live, as before
        assert metrics.split_window(window)[2] == timezone.localdate(window.until) + timedelta(days=1)
        assert metrics.period_counts(window) == metrics.period_counts(live)
        assert metrics.cost_by_kind(window) == metrics.cost_by_kind(live)
        assert tool_metrics.tool_stats(window) == tool_metrics.tool_stats(live)
    counts = metrics.repeated_error_summary(Window.last(7))
    assert counts["errors"] == Step.objects.exclude(error_signature="").count() and counts["repeated"] > 0


def test_a_window_to_now_reads_steps_only_of_the_runs_not_counted_yet(months):
    window = Window.last(365)
    with CaptureQueriesContext(connection) as queries:
        metrics.period_counts(window)
        tool_metrics.tool_stats(window)
    read_steps = [q["sql"] for q in queries if '"feedback_step"' in q["sql"]]
    assert read_steps and all('"counted_at" IS NULL' in sql for sql in read_steps)
