"""Keeps the DailyRunStats and DailyToolStats rollups current: the counts of one (day, task
kind), and of its tools, are recounted by the metric definitions' own queries (feedback.metrics)
and written over the old rows.

Recounting a whole day, rather than adding +1 here and -1 there, makes every refresh
idempotent: a redelivered task, a run scored twice or a refresh racing another one all end with
the same, right numbers. A day holds a few thousand runs at most, so a recount is milliseconds.
"""

import zlib
from datetime import date, datetime, timedelta
from operator import itemgetter

from django.db import connection, transaction
from django.utils import timezone

from feedback import metrics, tool_metrics
from feedback.models import DailyRunStats, DailyToolStats, Run


def _day_window(since_day: date, until_day: date, kind: str = "") -> metrics.Window:
    return metrics.Window(
        since=timezone.make_aware(datetime.combine(since_day, datetime.min.time())),
        until=timezone.make_aware(datetime.combine(until_day, datetime.min.time())),
        kind=kind,
        granularity="day",
    )


def _counted(window: metrics.Window) -> list[DailyRunStats]:
    found: dict[tuple[date, str], DailyRunStats] = {}
    by = ("period", "task_kind")
    for row in [*metrics.run_counts(window, by=by), *metrics.error_counts(window, by=by)]:
        day = timezone.localtime(row.pop("period")).date()
        key = (day, row.pop("task_kind"))
        stats = found.setdefault(key, DailyRunStats(day=key[0], task_kind=key[1]))
        for name, value in row.items():
            setattr(stats, name, value or 0)
    return list(found.values())


def _counted_tools(window: metrics.Window) -> list[DailyToolStats]:
    found: dict[tuple[date, str, str], dict] = {}
    rows = tool_metrics.tool_call_counts(window, by=("day", "task_kind", "tool_name"))
    tool_metrics.add_tool_counts(found, rows, key=itemgetter("day", "task_kind", "tool_name"))
    return [
        DailyToolStats(
            day=day,
            task_kind=kind,
            tool_name=tool,
            **{name: counts[name] for name in DailyToolStats.COUNTS},
            latency={str(bucket): calls for bucket, calls in sorted(counts["latency"].items())},
        )
        for (day, kind, tool), counts in found.items()
    ]


def daily_stats_rebuild(*, since_day: date, until_day: date, kind: str = "") -> int:
    """Recount every (day, kind) in ``[since_day, until_day)``, its runs and its tool calls;
    returns the rows written."""
    window = _day_window(since_day, until_day, kind)
    with transaction.atomic():
        if connection.vendor == "postgresql":
            # Serialise refreshes of the same day: the recount then sees every earlier commit.
            for day in range((until_day - since_day).days):
                key = zlib.crc32(f"daily-stats:{since_day + timedelta(days=day)}".encode())
                connection.cursor().execute("SELECT pg_advisory_xact_lock(%s)", [key])
        written = 0
        for model, rows in ((DailyRunStats, _counted(window)), (DailyToolStats, _counted_tools(window))):
            stale = model.objects.filter(day__gte=since_day, day__lt=until_day)
            (stale.filter(task_kind=kind) if kind else stale).delete()
            model.objects.bulk_create(rows, batch_size=1000)
            written += len(rows)
    return written


def daily_stats_refresh_run(*, run_id: int) -> None:
    """Recount the day of one run, after it ended, was scored, retried or cancelled."""
    run = Run.objects.filter(pk=run_id).values("created_at", "task_kind").first()
    if run is None:
        return
    day = timezone.localtime(run["created_at"]).date()
    daily_stats_rebuild(since_day=day, until_day=day + timedelta(days=1), kind=run["task_kind"])


def daily_stats_refresh_recent(*, days: int = 2) -> None:
    """The safety net run by beat: recount the last days whatever happened to them."""
    today = timezone.localdate()
    daily_stats_rebuild(since_day=today - timedelta(days=days - 1), until_day=today + timedelta(days=1))
