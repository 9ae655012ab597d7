"""The window a metric is computed over, and the closed days in it the daily tables answer for."""

from dataclasses import dataclass, replace
from datetime import date, datetime, timedelta
from datetime import time as dt_time

from django.db.models import Max, Min, QuerySet
from django.db.models.functions import TruncDay, TruncWeek
from django.utils import timezone

from feedback.models import DailyRunStats, Run

GRANULARITIES = {"day": TruncDay, "week": TruncWeek}
ENDED = [Run.Status.SUCCEEDED, Run.Status.FAILED, Run.Status.CANCELLED]


@dataclass(frozen=True)
class Window:
    """The production runs created in ``[since, until)``, of one task kind if ``kind`` is set."""

    since: datetime
    until: datetime
    kind: str = ""
    granularity: str = "day"

    @classmethod
    def last(cls, days: int, *, kind: str = "", granularity: str = "day") -> "Window":
        """From the midnight ``days`` days ago until now: the first period is a whole day (as its
        bar on the chart suggests), read from the daily tables like every closed day; today is
        counted live."""
        until = timezone.now()
        since = midnight(timezone.localtime(until - timedelta(days=days)).date())
        return cls(since=since, until=until, kind=kind, granularity=granularity)

    def runs(self) -> QuerySet[Run]:
        # Only production runs count: experiment and playground runs are measured apart.
        runs = Run.objects.filter(created_at__gte=self.since, created_at__lt=self.until, purpose=Run.Purpose.PRODUCTION)
        return runs.filter(task_kind=self.kind) if self.kind else runs

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


def midnight(day: date) -> datetime:
    return timezone.make_aware(datetime.combine(day, dt_time.min))


def built_days() -> tuple[date, date] | None:
    """The days ``[first, last)`` the daily tables hold: from the oldest day rebuilt to the newest,
    every day between rebuilt too (daily.py keeps them contiguous), a day without rows one without
    production runs. None before the first rebuild."""
    row = DailyRunStats.objects.aggregate(first=Min("day"), last=Max("day"))
    return None if row["first"] is None else (row["first"], row["last"] + timedelta(days=1))


def split_window(window: Window) -> tuple[list[Window], date | None, date | None]:
    """The whole days ``[first, last)`` of the window the daily tables answer for (closed days
    that have been rebuilt), and the parts counted live from the rows: the partial edges, today,
    and any day not rebuilt yet (a day that closed since beat's last rebuild). ``first`` is None
    when the tables answer for no day of the window."""
    first = timezone.localtime(window.since).date()
    if midnight(first) < window.since:
        first += timedelta(days=1)
    last = min(timezone.localtime(window.until).date(), timezone.localdate())
    built = built_days()
    if built is not None:
        first, last = max(first, built[0]), min(last, built[1])
    if built is None or first >= last:
        return [window], None, None
    live = []
    if window.since < midnight(first):
        live.append(replace(window, until=midnight(first)))
    if midnight(last) < window.until:
        live.append(replace(window, since=midnight(last)))
    return live, first, last


def whole_days(model: type, window: Window, first: date, last: date) -> QuerySet:
    """The daily rows of the window's whole days ``[first, last)``, of its kind if it has one."""
    rows = model.objects.filter(day__gte=first, day__lt=last)
    return rows.filter(task_kind=window.kind) if window.kind else rows
