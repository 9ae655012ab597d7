"""The rollups behind the metrics: DailyRunStats, DailyToolStats and DailyToolLatency, and the
monthly sums of the tool rows (MonthlyToolStats, MonthlyToolLatency) that long windows read.

A row holds the sum of the figures of its day's *counted* runs: a run is counted once it has
ended (``rollup_add``: after its evaluation, or at its cancel), and a later change to a counted
run (a reviewer's score, a re-evaluation, a re-run of it) adds the difference it makes
(``rollup_change``). Either way the run's figures are counted by the metric definitions' own
queries (feedback.metrics, feedback.tool_metrics) restricted to that one run, so a few small
queries replace a recount of the whole day. Runs still going are not in the rollups; the current
day, always a partial one, is counted live.

``daily_stats_rebuild`` recounts days from scratch, by the same queries over their counted runs:
beat does it for the last two days every 15 minutes (the safety net: say an earlier run's error
made this run's error a repeated one), and ``manage.py rebuild_daily_stats`` for any range.

A monthly row is always the sum of its month's daily rows: an addition adds the same figures to
the day's rows and to the month's, and a recount of days recounts their months from the daily
rows (``monthly_stats_rebuild``), in the same transaction.

Additions commute (F() increments), so they only exclude a recount of their day and month: on
PostgreSQL they hold the day's and the month's advisory locks shared, and a recount holds its
days' exclusively, then its months' (always in that order: days before months); SQLite has one
writer at a time.
"""

import functools
import operator
import zlib
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta

from django.db import IntegrityError, connection, transaction
from django.db.models import Case, DateField, F, Model, Q, Sum, Value, When
from django.db.models.functions import Trunc
from django.utils import timezone

from feedback import metrics, tool_metrics
from feedback.models import DailyRunStats, DailyToolLatency, DailyToolStats, MonthlyToolLatency, MonthlyToolStats, Run

# Each monthly table, the daily one it adds up, their key beside the period and their counts.
MONTHLY = (
    (MonthlyToolStats, DailyToolStats, ("task_kind", "tool_name"), MonthlyToolStats.COUNTS),
    (MonthlyToolLatency, DailyToolLatency, ("task_kind", "tool_name", "bucket"), ("calls",)),
)


@dataclass
class Figures:
    """What some runs of one day and task kind add to the rollups."""

    runs: Counter = field(default_factory=Counter)  # DailyRunStats.COUNTS
    tools: dict[str, Counter] = field(default_factory=dict)  # tool -> DailyToolStats.COUNTS
    latency: Counter = field(default_factory=Counter)  # (tool, bucket) -> calls

    def __sub__(self, other: "Figures") -> "Figures":
        empty = Counter()
        tools = {t: _minus(self.tools.get(t, empty), other.tools.get(t, empty)) for t in {*self.tools, *other.tools}}
        return Figures(_minus(self.runs, other.runs), tools, _minus(self.latency, other.latency))


def _minus(a: Counter, b: Counter) -> Counter:
    # Counter's own subtraction drops negative counts; a difference must keep them.
    return Counter({k: a.get(k, 0) - b.get(k, 0) for k in {*a, *b}})


def _counts(window: metrics.Window, by: tuple[str, ...]) -> dict[tuple, Figures]:
    """The figures of the window's runs per ``by``: ("task_kind",) or ("day", "task_kind")."""
    found: dict[tuple, Figures] = {}

    def of(row: dict) -> Figures:
        if "day" in by:
            row["day"] = timezone.localtime(row.pop("period")).date() if "period" in row else row["day"]
        return found.setdefault(tuple(row.pop(name) for name in by), Figures())

    run_by = tuple("period" if name == "day" else name for name in by)
    for row in [*metrics.run_counts(window, by=run_by), *metrics.error_counts(window, by=run_by)]:
        figures = of(row)
        figures.runs.update({name: value or 0 for name, value in row.items()})
    per_tool: dict[tuple, dict] = {}
    tool_metrics.add_tool_counts(
        per_tool,
        tool_metrics.tool_call_counts(window, by=(*by, "tool_name")),
        key=lambda row: tuple(row[name] for name in (*by, "tool_name")),
    )
    for (*key, tool), counts in per_tool.items():
        figures = found.setdefault(tuple(key), Figures())
        figures.tools[tool] = Counter({name: counts[name] for name in DailyToolStats.COUNTS})
        figures.latency.update({(tool, bucket): calls for bucket, calls in counts["latency"].items()})
    return found


def _figures(run: Run) -> Figures:
    """One run's figures: what the metric queries count for it, read with three small queries
    (the run with its intervention flags, its errors by signature marked repeated or not, its
    tool calls) and counted here. The grouped aggregates the recount uses cost ten times as much to build for one
    run; tests/test_rollups.py checks that what runs add always equals a recount."""
    window = metrics.Window.of_run(run)
    row = metrics.runs_with_intervention_flags(window).values(
        "status", "outcome", "score", "cost", "has_confirmation", "has_human_score", "has_retry"
    )[0]
    ended = row["status"] in metrics.ENDED
    person = {
        "confirmed": row["has_confirmation"],
        "human_scored": row["has_human_score"],
        "retried": row["has_retry"],
        "cancelled": row["status"] == Run.Status.CANCELLED,
    }
    errors = list(metrics.error_groups(window).values_list("errors", "is_repeated"))
    figures = Figures()
    figures.runs.update(
        runs=1,
        ended=int(ended),
        succeeded=int(row["status"] == Run.Status.SUCCEEDED),
        accomplished=int(ended and row["outcome"] == Run.Outcome.ACCOMPLISHED),
        judged=int(ended and row["outcome"] != Run.Outcome.UNKNOWN),
        scored=int(ended and row["score"] is not None),
        score_sum=row["score"] if ended and row["score"] is not None else 0,
        costed=int(ended and row["cost"] is not None),
        cost_sum=row["cost"] if ended and row["cost"] is not None else 0,
        intervened=int(any(person.values())),
        errors=sum(n for n, _ in errors),
        repeated_errors=sum(n for n, repeated in errors if repeated),
        runs_with_repeated=int(any(repeated for _, repeated in errors)),
        **{reason: int(flag) for reason, flag in person.items()},
    )
    calls = tool_metrics.tool_calls(window).values_list("tool_name", "success", "attempts", "duration_ms")
    for tool, success, attempts, duration in calls:
        counts = figures.tools.setdefault(tool, Counter())
        counts.update(calls=1, succeeded=int(success is True), retries=attempts - 1)
        if duration is not None:
            counts.update(timed=1, duration_sum=duration)
            figures.latency[(tool, tool_metrics.latency_bucket(duration))] += 1
    return figures


def _midnight(day: date) -> datetime:
    return timezone.make_aware(datetime.combine(day, datetime.min.time()))


def _day_of(run: Run) -> date:
    return timezone.localtime(run.created_at).date()


def _lock(name: str, *, shared: bool) -> None:
    if connection.vendor == "postgresql":
        kind = "pg_advisory_xact_lock_shared" if shared else "pg_advisory_xact_lock"
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT {kind}(%s)", [zlib.crc32(name.encode())])


def _lock_day(day: date, *, shared: bool) -> None:
    _lock(f"daily-stats:{day}", shared=shared)


def _lock_month(month: date, *, shared: bool) -> None:
    _lock(f"monthly-stats:{month:%Y-%m}", shared=shared)


def month_of(day: date) -> date:
    return day.replace(day=1)


def _next_month(month: date) -> date:
    return (month.replace(day=28) + timedelta(days=4)).replace(day=1)


def _increment(model: type[Model], key: dict, amounts: dict) -> None:
    """Add ``amounts`` to the row of ``key``, made if it is missing."""
    amounts = {name: value for name, value in amounts.items() if value}
    if not amounts:
        return
    increments = {name: F(name) + value for name, value in amounts.items()}
    if model.objects.filter(**key).update(**increments):
        return
    try:
        with transaction.atomic():
            model.objects.create(**key, **amounts)
    except IntegrityError:  # another addition made it first
        model.objects.filter(**key).update(**increments)


def _increment_all(model: type[Model], rows: list[tuple[dict, dict]]) -> None:
    """``_increment`` of several rows of one table, in two statements when they all exist (as
    they do but for a day's or a month's first runs): which exist, then one UPDATE that adds
    each its own amounts. A row that existed cannot vanish meanwhile (only a recount deletes,
    and the caller holds its day's and month's locks); a missing one is made on its own."""
    rows = [(key, amounts) for key, amounts in rows if any(amounts.values())]
    if len(rows) <= 1:
        for key, amounts in rows:
            _increment(model, key, amounts)
        return
    names = list(rows[0][0])
    matching = functools.reduce(operator.or_, (Q(**key) for key, _ in rows))
    existing = set(model.objects.filter(matching).values_list(*names))
    found = [(key, amounts) for key, amounts in rows if tuple(key.values()) in existing]
    for key, amounts in rows:
        if tuple(key.values()) not in existing:
            try:
                with transaction.atomic():
                    model.objects.create(**key, **amounts)
            except IntegrityError:  # another addition made it meanwhile
                _increment(model, key, amounts)
    if not found:
        return
    counts = sorted({name for _, amounts in found for name, value in amounts.items() if value})
    increments = {
        name: F(name) + Case(*[When(Q(**key), then=Value(a[name])) for key, a in found if a.get(name)], default=0)
        for name in counts
    }
    model.objects.filter(functools.reduce(operator.or_, (Q(**key) for key, _ in found))).update(**increments)


def _add(day: date, kind: str, figures: Figures) -> None:
    month = month_of(day)
    _lock_day(day, shared=True)
    _lock_month(month, shared=True)
    _increment(DailyRunStats, {"day": day, "task_kind": kind}, figures.runs)
    for period in ({"day": day}, {"month": month}):
        tools = [({**period, "task_kind": kind, "tool_name": tool}, c) for tool, c in figures.tools.items()]
        _increment_all(DailyToolStats if "day" in period else MonthlyToolStats, tools)
        latency = [
            ({**period, "task_kind": kind, "tool_name": tool, "bucket": bucket}, {"calls": calls})
            for (tool, bucket), calls in figures.latency.items()
        ]
        _increment_all(DailyToolLatency if "day" in period else MonthlyToolLatency, latency)


def rollup_add(*, run_id: int) -> bool:
    """Count an ended run in its day's rollups, once: a second call (a redelivered task, the
    evaluation after a cancel) adds nothing. True when it was added now."""
    with transaction.atomic():
        run = (
            Run.objects.select_for_update().filter(pk=run_id, counted_at__isnull=True, status__in=metrics.ENDED).first()
        )
        if run is None:
            return False
        _add(_day_of(run), run.task_kind, _figures(run))
        Run.objects.filter(pk=run_id).update(counted_at=timezone.now())
    return True


@contextmanager
def rollup_change(*, run_id: int) -> Iterator[None]:
    """Around a change to one run (in the caller's transaction): if the run is counted, what the
    change does to its figures is added to its day's rollups when the block ends."""
    assert connection.in_atomic_block, "the difference is added in the change's own transaction"
    run = Run.objects.select_for_update().get(pk=run_id)
    before = _figures(run) if run.counted_at else None
    yield
    if before is not None:
        _add(_day_of(run), run.task_kind, _figures(run) - before)


def daily_stats_rebuild(*, since_day: date, until_day: date, kind: str = "") -> int:
    """Recount every (day, kind) in ``[since_day, until_day)`` over its counted runs; returns
    the rows written."""
    window = metrics.Window(since=_midnight(since_day), until=_midnight(until_day), kind=kind, counted=True)
    with transaction.atomic():
        for offset in range((until_day - since_day).days):
            _lock_day(since_day + timedelta(days=offset), shared=False)
        for model in (DailyRunStats, DailyToolStats, DailyToolLatency):
            stale = model.objects.filter(day__gte=since_day, day__lt=until_day)
            (stale.filter(task_kind=kind) if kind else stale).delete()
        rows: list[Model] = []
        for (day, task_kind), figures in _counts(window, by=("day", "task_kind")).items():
            rows.append(DailyRunStats(day=day, task_kind=task_kind, **figures.runs))
            rows += [DailyToolStats(day=day, task_kind=task_kind, tool_name=t, **c) for t, c in figures.tools.items()]
            rows += [
                DailyToolLatency(day=day, task_kind=task_kind, tool_name=tool, bucket=bucket, calls=calls)
                for (tool, bucket), calls in figures.latency.items()
            ]
        for model in (DailyRunStats, DailyToolStats, DailyToolLatency):
            model.objects.bulk_create([row for row in rows if type(row) is model], batch_size=1000)
        monthly_stats_rebuild(since_day=since_day, until_day=until_day, kind=kind)
    return len(rows)


def monthly_stats_rebuild(*, since_day: date, until_day: date, kind: str = "") -> int:
    """Recount the monthly rows of every month that overlaps ``[since_day, until_day)`` (of one
    kind, or all) as the sums of their daily rows; returns the rows written. Meant to run inside
    a recount of those days (``daily_stats_rebuild``), after it, or on its own."""
    if since_day >= until_day:
        return 0
    months, month = [], month_of(since_day)
    while month < until_day:
        months.append(month)
        month = _next_month(month)
    with transaction.atomic():
        for month in months:  # after any day lock this transaction holds, never before
            _lock_month(month, shared=False)
        since, until = months[0], _next_month(months[-1])
        written = 0
        for monthly, daily, key, counts in MONTHLY:
            stale = monthly.objects.filter(month__gte=since, month__lt=until)
            (stale.filter(task_kind=kind) if kind else stale).delete()
            days = daily.objects.filter(day__gte=since, day__lt=until)
            days = days.filter(task_kind=kind) if kind else days
            sums = (
                days.annotate(month=Trunc("day", "month", output_field=DateField()))
                .values("month", *key)
                .annotate(**{name: Sum(name) for name in counts})
                .order_by()
            )
            rows = [monthly(**row) for row in sums]
            monthly.objects.bulk_create(rows, batch_size=1000)
            written += len(rows)
    return written


def rollup_add_missed(*, since_day: date, until_day: date) -> int:
    """Count the runs of ``[since_day, until_day)`` that ended without being counted (a run
    failed by a crash before its evaluation, an evaluation lost with the broker); returns how many.
    Each in a transaction of its own, outside any recount: a run's row is locked before its day."""
    missed = metrics.Window(since=_midnight(since_day), until=_midnight(until_day)).runs()
    missed = missed.filter(counted_at__isnull=True, status__in=metrics.ENDED).values_list("pk", flat=True)
    return sum(rollup_add(run_id=run_id) for run_id in missed.iterator())


def daily_stats_refresh(*, since_day: date, until_day: date) -> int:
    """Count the missed runs of ``[since_day, until_day)``, then recount its days."""
    rollup_add_missed(since_day=since_day, until_day=until_day)
    return daily_stats_rebuild(since_day=since_day, until_day=until_day)


def daily_stats_refresh_recent(*, days: int = 2) -> None:
    """The safety net run by beat: the last days counted again whatever happened to them."""
    today = timezone.localdate()
    daily_stats_refresh(since_day=today - timedelta(days=days - 1), until_day=today + timedelta(days=1))
