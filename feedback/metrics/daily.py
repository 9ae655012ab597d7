"""The daily tables (DailyRunStats, DailyToolStats, DailyToolLatency): closed days rebuilt whole
from the rows, by the metric definitions' own queries. The only writer of metric tables; the
rule of when a day is rebuilt is in the package docstring (feedback/metrics/__init__.py).

``daily_stats_refresh`` is beat's job (every 15 minutes) and ``daily_stats_rebuild_all`` the
``rebuild_daily_stats`` command's; both rebuild in chunks of days, each chunk counted outside any
transaction and written (its old rows deleted, its new ones inserted) in a short one.
"""

import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta

from django.db import IntegrityError, transaction
from django.db.models import Max, Min
from django.db.models.functions import TruncDate
from django.utils import timezone
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt

from feedback.models import DailyRunStats, DailyToolLatency, DailyToolStats, Evaluation, Run

from .counts import error_counts, run_counts
from .tools import add_tool_counts, tool_call_counts
from .window import Window, built_days, midnight

# A change stamped this long before a rebuild began may have committed after it read the rows
# (a transaction's now() is taken before its commit): the day is counted again to be sure.
SLACK = timedelta(minutes=10)
CHUNK_DAYS = 31
TABLES = (DailyRunStats, DailyToolStats, DailyToolLatency)


@dataclass
class Figures:
    """What one day's runs of one task kind count in the three tables."""

    runs: Counter = field(default_factory=Counter)  # DailyRunStats.COUNTS
    tools: dict[str, dict] = field(default_factory=dict)  # tool -> DailyToolStats.COUNTS
    latency: Counter = field(default_factory=Counter)  # (tool, bucket) -> calls


def _count(window: Window) -> dict[tuple[date, str], Figures]:
    """The figures of the window's runs per (day, task kind), by the live queries themselves."""
    found: dict[tuple[date, str], Figures] = {}

    def of(row: dict) -> Figures:
        period = row.pop("period", None)
        day = timezone.localtime(period).date() if period is not None else row.pop("day")
        return found.setdefault((day, row.pop("task_kind")), Figures())

    for row in [*run_counts(window, by=("period", "task_kind")), *error_counts(window, by=("period", "task_kind"))]:
        of(row).runs.update({name: value or 0 for name, value in row.items()})
    per_tool: dict[tuple, dict] = {}
    rows = tool_call_counts(window, by=("day", "task_kind", "tool_name"))
    add_tool_counts(per_tool, rows, key=lambda row: (row["day"], row["task_kind"], row["tool_name"]))
    for (day, kind, tool), counts in per_tool.items():
        figures = found.setdefault((day, kind), Figures())
        figures.tools[tool] = {name: counts[name] for name in DailyToolStats.COUNTS}
        figures.latency.update({(tool, bucket): calls for bucket, calls in counts["latency"].items()})
    return found


def _rows(found: dict[tuple[date, str], Figures], refreshed_at: datetime) -> list:
    rows: list = []
    for (day, kind), figures in found.items():
        rows.append(DailyRunStats(day=day, task_kind=kind, refreshed_at=refreshed_at, **figures.runs))
        rows += [DailyToolStats(day=day, task_kind=kind, tool_name=t, **c) for t, c in figures.tools.items()]
        rows += [
            DailyToolLatency(day=day, task_kind=kind, tool_name=tool, bucket=bucket, calls=calls)
            for (tool, bucket), calls in figures.latency.items()
        ]
    return rows


def rebuild(*, since_day: date, until_day: date) -> int:
    """Count the closed days ``[since_day, until_day)`` again from the rows and replace their
    rows (today, still open, is never written: it is counted live); returns the rows written."""
    until_day = min(until_day, timezone.localdate())
    if since_day >= until_day:
        return 0

    def replaced() -> int:
        began = timezone.now()
        rows = _rows(_count(Window(since=midnight(since_day), until=midnight(until_day))), began)
        with transaction.atomic():
            for model in TABLES:
                model.objects.filter(day__gte=since_day, day__lt=until_day).delete()
            for model in TABLES:
                model.objects.bulk_create([row for row in rows if type(row) is model], batch_size=1000)
        return len(rows)

    # An IntegrityError: another rebuild of the same days (beat beside the command) wrote its rows
    # after we deleted. Count once more, at once, over what it saw and since (feedback/retrying.py).
    retry = Retrying(retry=retry_if_exception_type(IntegrityError), stop=stop_after_attempt(2), reraise=True)
    return retry(replaced)


def _days(since: date, until: date) -> list[date]:
    return [since + timedelta(days=n) for n in range((until - since).days)]


def _chunks(days: list[date], *, newest_first: bool = False) -> list[tuple[date, date]]:
    """Runs of consecutive days as ``[since, until)`` ranges of at most CHUNK_DAYS."""
    ranges: list[tuple[date, date]] = []
    for day in sorted(days):
        if ranges and ranges[-1][1] == day and (day - ranges[-1][0]).days < CHUNK_DAYS:
            ranges[-1] = (ranges[-1][0], day + timedelta(days=1))
        else:
            ranges.append((day, day + timedelta(days=1)))
    return ranges[::-1] if newest_first else ranges


def _production_days(since: date | None, until: date) -> list[date]:
    """The days from the first to the last with production runs in ``[since, until)`` (from
    the beginning when ``since`` is None): two ends of the run_recent index."""
    runs = Run.objects.filter(purpose=Run.Purpose.PRODUCTION, created_at__lt=midnight(until))
    if since is not None:
        runs = runs.filter(created_at__gte=midnight(since))
    span = runs.aggregate(first=Min("created_at"), last=Max("created_at"))
    if span["first"] is None:
        return []
    return _days(timezone.localtime(span["first"]).date(), timezone.localtime(span["last"]).date() + timedelta(days=1))


def changed_days(since: datetime) -> dict[date, datetime]:
    """The days whose production runs changed since ``since``, with the latest change of each:
    a run that ended (it changes every day from its creation's to its end's: an earlier run
    that was still going can make a later run's error a repeated one), an evaluation written
    (a round of the chain, a reviewer's score or verdict), a run asked for again (its original's
    day counts an intervention). Each an index range scan: run_finished, evaluation_kind_created
    and run_recent."""
    tz = timezone.get_current_timezone()
    today = timezone.localdate()
    changes: dict[date, datetime] = {}

    def note(day: date, at: datetime) -> None:
        if day < today and (day not in changes or changes[day] < at):
            changes[day] = at

    ended = (
        Run.objects.filter(purpose=Run.Purpose.PRODUCTION, finished_at__gte=since)
        .values(day=TruncDate("created_at", tzinfo=tz))
        .annotate(at=Max("finished_at"), through=Max(TruncDate("finished_at", tzinfo=tz)))
        .order_by()
    )
    for row in ended:
        for day in _days(row["day"], min(row["through"], today) + timedelta(days=1)):
            note(day, row["at"])
    # Every kind named so the (kind, created_at) index serves the range.
    evaluated = (
        Evaluation.objects.filter(
            kind__in=Evaluation.Kind.values, created_at__gte=since, run__purpose=Run.Purpose.PRODUCTION
        )
        .values(day=TruncDate("run__created_at", tzinfo=tz))
        .annotate(at=Max("created_at"))
        .order_by()
    )
    retried = (
        Run.objects.filter(created_at__gte=since, retry_of__purpose=Run.Purpose.PRODUCTION)
        .values(day=TruncDate("retry_of__created_at", tzinfo=tz))
        .annotate(at=Max("created_at"))
        .order_by()
    )
    for row in [*evaluated, *retried]:
        note(row["day"], row["at"])
    return changes


def days_due() -> list[tuple[date, date]]:
    """The ranges of closed days to rebuild now, in the order that keeps the tables contiguous
    (built_days): the days that closed since the newest rebuilt one, oldest first; the rebuilt
    days whose runs changed since their rebuild; the days before the oldest rebuilt one, newest
    first (a history older than the tables: the first rebuild, a migration that emptied them).
    Days without production runs at either end have nothing to write and are left out."""
    today = timezone.localdate()
    built = built_days()
    if built is None:
        return _chunks(_production_days(None, today), newest_first=True)
    latest = DailyRunStats.objects.aggregate(at=Max("refreshed_at"))["at"]
    changes = changed_days(latest - SLACK)
    refreshed = dict(
        DailyRunStats.objects.filter(day__in=list(changes))
        .values("day")
        .annotate(at=Min("refreshed_at"))
        .values_list("day", "at")
    )
    changed = [
        day
        for day, at in changes.items()
        if built[0] <= day < built[1] and (day not in refreshed or at > refreshed[day] - SLACK)
    ]
    return [
        *_chunks(_production_days(built[1], today)),
        *_chunks(changed),
        *_chunks(_production_days(None, built[0]), newest_first=True),
    ]


def _rebuild_all_of(ranges: list[tuple[date, date]], *, seconds: float | None = None) -> tuple[int, set[date]]:
    """Rebuild ``ranges`` in order; with ``seconds``, start no range once that long has passed
    (one range at least). Returns the rows written and the days rebuilt."""
    started, written, rebuilt = time.monotonic(), 0, set()
    for since_day, until_day in ranges:
        written += rebuild(since_day=since_day, until_day=until_day)
        rebuilt.update(_days(since_day, until_day))
        if seconds is not None and time.monotonic() - started >= seconds:
            break
    return written, rebuilt


def daily_stats_refresh(*, seconds: float | None = None) -> int:
    """Rebuild the ranges ``days_due`` lists (beat's job); with ``seconds``, start no range once
    that long has passed, the rest left to the next run. Returns the rows written."""
    return _rebuild_all_of(days_due(), seconds=seconds)[0]


def daily_stats_rebuild_all(*, days: int | None = None) -> int:
    """Rebuild the last ``days`` closed days, or every day from the first production run's (or
    the oldest row's) to yesterday. What beat would rebuild comes first, in its order, so the
    tables stay contiguous however far this gets; the other days are then replaced in place."""
    written, rebuilt = _rebuild_all_of(days_due())
    today = timezone.localdate()
    if days is not None:
        since = today - timedelta(days=days)
    else:
        oldest = DailyRunStats.objects.aggregate(day=Min("day"))["day"]
        first = next(iter(_production_days(None, today)), None)
        since = min([day for day in (first, oldest) if day is not None], default=today)
    rest = [day for day in _days(since, today) if day not in rebuilt]
    return written + _rebuild_all_of(_chunks(rest, newest_first=True))[0]
