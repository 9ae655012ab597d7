"""The window a metric is computed over, and the whole days (and months) in it the rollups answer for."""

from dataclasses import dataclass, replace
from datetime import date, datetime, timedelta
from datetime import time as dt_time

from django.db.models import Q, QuerySet
from django.db.models.functions import TruncDay, TruncWeek
from django.utils import timezone

from feedback.models import (
    DailyRunStats,
    DailyToolLatency,
    DailyToolStats,
    MonthlyToolLatency,
    MonthlyToolStats,
    Run,
)

GRANULARITIES = {"day": TruncDay, "week": TruncWeek}
ENDED = [Run.Status.SUCCEEDED, Run.Status.FAILED, Run.Status.CANCELLED]


@dataclass(frozen=True)
class Window:
    since: datetime
    until: datetime
    kind: str = ""
    granularity: str = "day"
    # True: only the runs whose figures are in the daily rollups (feedback/rollups.py counts so);
    # False: only those not in them yet (still going, or not evaluated yet); None: every run.
    counted: bool | None = None
    # One run alone: its own figures, as the rollups add them.
    run_id: int | None = None
    # The window ends now: no run was created after ``until``, so the current day's rollup rows
    # hold the current day's counted runs of the window, and only its uncounted ones are counted
    # live (see split_window).
    to_now: bool = False

    @classmethod
    def last(cls, days: int, *, kind: str = "", granularity: str = "day") -> "Window":
        """From the midnight ``days`` days ago until now: the first period is a whole day (as
        its bar on the chart suggests), and it comes from the rollups instead of a live count;
        so does the current day's counted runs (``to_now``)."""
        until = timezone.now()
        since = _midnight(timezone.localtime(until - timedelta(days=days)).date())
        return cls(since=since, until=until, kind=kind, granularity=granularity, to_now=True)

    @classmethod
    def of_run(cls, run: Run) -> "Window":
        return cls(since=run.created_at, until=run.created_at + timedelta(microseconds=1), run_id=run.pk)

    def runs(self) -> QuerySet[Run]:
        runs = Run.objects.filter(created_at__gte=self.since, created_at__lt=self.until)
        if self.kind:
            runs = runs.filter(task_kind=self.kind)
        if self.counted is not None:
            runs = runs.filter(counted_at__isnull=not self.counted)
        if self.run_id is not None:
            runs = runs.filter(pk=self.run_id)
        return runs

    def trunc(self, field: str):
        return GRANULARITIES[self.granularity](field, tzinfo=timezone.get_current_timezone())

    def periods(self) -> list[date]:
        """Every period start in the window, so a chart shows empty days as gaps, not jumps."""
        start = timezone.localtime(self.since).date()
        end = timezone.localtime(self.until - timedelta(microseconds=1)).date()  # until is exclusive
        step = timedelta(days=1)
        if self.granularity == "week":
            start -= timedelta(days=start.weekday())  # ISO weeks start on Monday, like TruncWeek
            step = timedelta(days=7)
        out = []
        while start <= end:
            out.append(start)
            start += step
        return out


def rate(part: float | None, whole: float | None) -> float | None:
    return None if not whole else (part or 0) / whole


def _midnight(day: date) -> datetime:
    return timezone.make_aware(datetime.combine(day, dt_time.min))


def split_window(window: Window) -> tuple[list[Window], date | None, date | None]:
    """The whole days ``[first, last)`` the rollups answer for, and what is counted live: the
    partial edges, and the whole days' runs that are not in the rollups yet (those still going
    or not evaluated yet: a few, found by a partial index). ``first`` is None when the window
    holds no whole day.

    A window that ends now (``to_now``) takes its current day as a whole one: the day's rollup
    rows hold its counted runs (all created before now) and its uncounted runs are counted live
    with the whole days' ones. Its figures are those of a live count of the day, but for the
    repeated-error flag of an error counted before an earlier run, still going then, made the
    same error: as on every whole day, the recount of the last two days (every 15 minutes)
    counts it repeated."""
    first = timezone.localtime(window.since).date()
    if _midnight(first) < window.since:
        first += timedelta(days=1)
    last = timezone.localtime(window.until).date()
    if window.to_now and _midnight(last) < window.until:
        last += timedelta(days=1)
    if first >= last:
        return [window], None, None
    live = [replace(window, since=_midnight(first), until=min(_midnight(last), window.until), counted=False)]
    if window.since < _midnight(first):
        live.append(replace(window, until=_midnight(first)))
    if _midnight(last) < window.until:
        live.append(replace(window, since=_midnight(last)))
    return live, first, last


def whole_days(
    model: type[DailyRunStats | DailyToolStats | DailyToolLatency], window: Window, first: date, last: date
) -> QuerySet:
    """The rollup rows of the window's whole days ``[first, last)``, of its kind if it has one."""
    rollups = model.objects.filter(day__gte=first, day__lt=last)
    return rollups.filter(task_kind=window.kind) if window.kind else rollups


def whole_months(first: date, last: date) -> tuple[date, date] | None:
    """The calendar months ``[start, end)`` (first days of months) that lie wholly inside the
    days ``[first, last)``, or None when no month does."""
    start = first if first.day == 1 else (first.replace(day=28) + timedelta(days=4)).replace(day=1)
    end = last.replace(day=1)
    return (start, end) if start < end else None


def whole_periods(
    daily: type[DailyToolStats | DailyToolLatency],
    monthly: type[MonthlyToolStats | MonthlyToolLatency],
    window: Window,
    first: date,
    last: date,
) -> list[QuerySet]:
    """The rollup rows that hold the window's whole days ``[first, last)`` (of its kind, if it
    has one): the monthly rows of the whole months among them, and the daily rows of the days
    before and after those. Monthly rows are sums of daily ones (feedback/rollups.py), so both
    give the same figures; a year reads ~12 monthly rows and at most ~60 days' rows per key."""
    months = whole_months(first, last)
    if months is None:
        return [whole_days(daily, window, first, last)]
    rows = monthly.objects.filter(month__gte=months[0], month__lt=months[1])
    days = daily.objects.filter(Q(day__gte=first, day__lt=months[0]) | Q(day__gte=months[1], day__lt=last))
    if window.kind:
        rows, days = rows.filter(task_kind=window.kind), days.filter(task_kind=window.kind)
    return [rows, days] if (first, last) != months else [rows]
