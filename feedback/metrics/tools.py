"""Per-tool figures: calls, success rate, retries, average latency and latency percentiles.

Closed days come from the DailyToolStats rows and their DailyToolLatency histograms (rebuilt by
daily.py with the query below), the rest of a window (its partial edges, today) is counted live
by the same query (``tool_call_counts``). Percentiles come from latency histograms, which add up
across days and kinds: the database adds them (one row per tool and bucket comes back).
"""

import functools
import math
from collections import Counter
from collections.abc import Callable, Hashable
from operator import itemgetter

from django.db.models import Case, Count, F, IntegerField, Q, QuerySet, Sum, Value, When
from django.db.models.functions import Cast, Floor, Ln, TruncDate
from django.utils import timezone

from feedback.models import DailyToolLatency, DailyToolStats, Step

from .window import Window, rate, split_window, whole_days

# Latency percentiles come from a histogram of ``duration_ms`` with log-scale buckets: bucket 0
# holds 0 ms, bucket b >= 1 holds [1.05^(b-1), 1.05^b) ms. Histograms add up, so the closed days'
# rows and the live parts of a window merge into one per tool.
LATENCY_BASE = 1.05
_LN_BASE = math.log(LATENCY_BASE)


def latency_bucket(ms: int) -> int:
    """The histogram bucket of a duration; ``latency_bucket_sql`` is the same in the database
    (the same double-precision operations: they agree, no whole duration lies near an edge)."""
    return 0 if ms <= 0 else 1 + math.floor(math.log(ms) / _LN_BASE)


def latency_bucket_sql(field: str) -> Case:
    return Case(
        When(**{field: 0}, then=Value(0)),
        default=Cast(Floor(Ln(field) / Value(_LN_BASE)), IntegerField()) + 1,
        output_field=IntegerField(),
    )


@functools.cache
def _first_ms(bucket: int) -> int:
    """The shortest whole duration in ``bucket`` or a later one."""
    if bucket <= 0:
        return 0
    ms = math.ceil(LATENCY_BASE ** (bucket - 1))
    while ms > 1 and latency_bucket(ms - 1) >= bucket:
        ms -= 1
    while latency_bucket(ms) < bucket:
        ms += 1
    return ms


def latency_bounds(bucket: int) -> tuple[int, int]:
    """The shortest and the longest whole duration (``duration_ms`` is an integer) of a bucket."""
    return _first_ms(bucket), _first_ms(bucket + 1) - 1


def _interpolated(value_at: Callable[[int], float], n: int, fraction: float) -> float | None:
    """``percentile_cont``'s interpolation between the values ranked floor and ceil of
    ``fraction * (n - 1)`` (ranks from 0, in ascending order)."""
    if not n:
        return None
    position = fraction * (n - 1)
    low = int(position)
    high = min(low + 1, n - 1)
    return value_at(low) + (value_at(high) - value_at(low)) * (position - low)


def percentile_cont(values: list[float], fraction: float) -> float | None:
    """The exact interpolated percentile, as PostgreSQL's ``percentile_cont`` computes it."""
    return _interpolated(sorted(values).__getitem__, len(values), fraction)


def histogram_percentile(latency: dict[int, int], fraction: float) -> float | None:
    """``percentile_cont`` of the durations a latency histogram counts, estimated: the value of
    a rank is placed inside its bucket (the bucket's calls spread evenly between its shortest
    and longest whole duration). The estimate of each rank stays inside the bucket of the true
    value, whose width is under 5% of any duration in it, so the percentile is within 5% of the
    exact one (and exact below 20 ms, where a bucket holds one whole duration)."""
    ordered = sorted((bucket, calls) for bucket, calls in latency.items() if calls)

    def value_at(rank: int) -> float:
        for bucket, calls in ordered:
            if rank < calls:
                shortest, longest = latency_bounds(bucket)
                return shortest + (longest - shortest) * (rank + 0.5) / calls
            rank -= calls
        raise IndexError(rank)

    return _interpolated(value_at, sum(calls for _, calls in ordered), fraction)


def tool_calls(window: Window) -> QuerySet[Step]:
    """The tool-call steps of the window's runs (a cached answer is a call too)."""
    return Step.objects.filter(run__in=window.runs(), kind=Step.Kind.TOOL_CALL).exclude(tool_name="")


def tool_call_counts(window: Window, *, by: tuple[str, ...] = ("tool_name",)) -> QuerySet:
    """Per ``by`` columns (``day`` and ``task_kind`` of the run, the day a date in the project's
    time zone) and latency ``bucket`` (None for calls without a duration): ``calls``,
    ``succeeded``, ``retries`` (the sum of ``attempts - 1``), ``timed`` (calls with a duration)
    and ``duration_sum``."""
    return (
        tool_calls(window)
        .annotate(
            day=TruncDate("run__created_at", tzinfo=timezone.get_current_timezone()),
            task_kind=F("run__task_kind"),
            bucket=latency_bucket_sql("duration_ms"),
        )
        .values(*by, "bucket")
        .annotate(
            calls=Count("id"),
            succeeded=Count("id", filter=Q(success=True)),
            retries=Sum(F("attempts") - 1),
            timed=Count("duration_ms"),
            duration_sum=Sum("duration_ms"),
        )
        .order_by()
    )


def add_tool_counts(into: dict, rows, key: Callable[[dict], Hashable]) -> None:
    """Add rows of ``tool_call_counts`` (or of DailyToolStats sums) into ``into[key(row)]``:
    the counts and a ``latency`` histogram {bucket: calls}."""
    for row in rows:
        totals = into.get(k := key(row))
        if totals is None:
            totals = into[k] = {**dict.fromkeys(DailyToolStats.COUNTS, 0), "latency": Counter()}
        for name in DailyToolStats.COUNTS:
            totals[name] += row.get(name) or 0
        if row.get("bucket") is not None:
            totals["latency"][row["bucket"]] += row["timed"]


def tool_stats(window: Window) -> list[dict]:
    """**Per-tool** figures over the tool calls of the window's runs, most called first:

    - calls: tool-call steps (a cached answer is a call too);
    - success rate: calls that succeeded / calls;
    - retries: extra attempts, the sum of ``attempts - 1``;
    - average latency: the mean ``duration_ms`` of the calls that have one (exact);
    - latency p50 / p95: **estimates, within 5%**, of the interpolated percentiles
      (``percentile_cont``) of ``duration_ms``, from a latency histogram (``histogram_percentile``).

    Closed days are read from the daily rows, and the rest of the window is counted live, by
    the same query that wrote those rows.
    """
    found: dict[str, dict] = {}
    live, first, last = split_window(window)
    if first is not None:
        sums = whole_days(DailyToolStats, window, first, last).values("tool_name")
        add_tool_counts(
            found, sums.annotate(**{c: Sum(c) for c in DailyToolStats.COUNTS}).order_by(), key=itemgetter("tool_name")
        )
        latency = whole_days(DailyToolLatency, window, first, last).values("tool_name", "bucket")
        for row in latency.annotate(added=Sum("calls")).order_by():
            found[row["tool_name"]]["latency"][row["bucket"]] += row["added"]
    for part in live:
        add_tool_counts(found, tool_call_counts(part), key=itemgetter("tool_name"))
    rows = [
        {
            "tool_name": tool,
            "calls": c["calls"],
            "succeeded": c["succeeded"],
            "success_rate": rate(c["succeeded"], c["calls"]),
            "retries": c["retries"],
            "avg_ms": rate(c["duration_sum"], c["timed"]),
            "p50_ms": histogram_percentile(c["latency"], 0.5),
            "p95_ms": histogram_percentile(c["latency"], 0.95),
        }
        for tool, c in found.items()
    ]
    return sorted(rows, key=lambda row: (-row["calls"], row["tool_name"]))
