"""The metric definitions: each written down once, here, and documented in the README.

Every metric is computed by the database (annotate/aggregate, TruncDay/TruncWeek), never by a
Python loop over runs. A run belongs to the period of its ``created_at``; the filters are a
window ``[since, until)`` and optionally one task kind. Rates are ``None`` when their
denominator is zero (no data is not a rate of 0).
"""

from dataclasses import dataclass
from datetime import date, datetime, timedelta

from django.db import connection
from django.db.models import (
    Aggregate,
    Avg,
    Count,
    Exists,
    F,
    FloatField,
    OuterRef,
    Q,
    QuerySet,
    Sum,
)
from django.db.models.functions import TruncDay, TruncWeek
from django.utils import timezone

from feedback.models import Evaluation, Run, Step, ToolConfirmation

GRANULARITIES = {"day": TruncDay, "week": TruncWeek}
ENDED = [Run.Status.SUCCEEDED, Run.Status.FAILED, Run.Status.CANCELLED]


@dataclass(frozen=True)
class Window:
    since: datetime
    until: datetime
    kind: str = ""
    granularity: str = "day"

    @classmethod
    def last(cls, days: int, *, kind: str = "", granularity: str = "day") -> "Window":
        until = timezone.now()
        return cls(since=until - timedelta(days=days), until=until, kind=kind, granularity=granularity)

    def runs(self) -> QuerySet[Run]:
        runs = Run.objects.filter(created_at__gte=self.since, created_at__lt=self.until)
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


def _rate(part: float | None, whole: float | None) -> float | None:
    return None if not whole else (part or 0) / whole


def _by_period(window: Window, rows: QuerySet, empty: dict) -> list[dict]:
    """Rows keyed by ``period`` spread over every period of the window."""
    found = {timezone.localtime(r.pop("period")).date(): r for r in rows}
    return [{"period": p, **found.get(p, empty)} for p in window.periods()]


# --- average score and success rate ------------------------------------------------------------
def _score_aggregates() -> dict:
    return {
        "runs": Count("id"),
        "scored": Count("score"),
        "avg_score": Avg("score"),
        "succeeded": Count("id", filter=Q(status=Run.Status.SUCCEEDED)),
    }


def score_trend(window: Window) -> list[dict]:
    """**Average score** and **success rate** per period, over the runs that have ended.

    - average score: mean of ``Run.score`` (the composite, where a human score outranks the
      evaluators) over the ended runs that have a score;
    - success rate: ended runs with status *succeeded* / all ended runs (succeeded, failed,
      cancelled). Queued and running runs are left out of both.
    """
    rows = (
        window.runs()
        .filter(status__in=ENDED)
        .annotate(period=window.trunc("created_at"))
        .values("period")
        .annotate(**_score_aggregates())
        .order_by("period")
    )
    out = _by_period(window, rows, {"runs": 0, "scored": 0, "avg_score": None, "succeeded": 0})
    for row in out:
        row["success_rate"] = _rate(row["succeeded"], row["runs"])
    return out


def score_summary(window: Window) -> dict:
    """The same two figures over the whole window."""
    row = window.runs().filter(status__in=ENDED).aggregate(**_score_aggregates())
    return {**row, "success_rate": _rate(row["succeeded"], row["runs"])}


# --- repeated errors -------------------------------------------------------------------------
def error_steps(window: Window) -> QuerySet[Step]:
    """Every error in the window's runs (a step with an error signature), flagged ``is_repeated``
    when a step of an EARLIER run (by ``created_at``, then id) had the same signature; earlier
    means any time before, inside the window or not, and of any task kind."""
    earlier = Step.objects.filter(error_signature=OuterRef("error_signature")).filter(
        Q(run__created_at__lt=OuterRef("run__created_at"))
        | Q(run__created_at=OuterRef("run__created_at"), run_id__lt=OuterRef("run_id"))
    )
    return Step.objects.filter(run__in=window.runs()).exclude(error_signature="").annotate(is_repeated=Exists(earlier))


def _error_aggregates() -> dict:
    return {
        "errors": Count("id"),
        "repeated": Count("id", filter=Q(is_repeated=True)),
        "runs_with_repeated": Count("run", filter=Q(is_repeated=True), distinct=True),
    }


def repeated_error_trend(window: Window) -> list[dict]:
    """**Repeated-error rate** per period.

    An error is a step with an ``error_signature`` (tool + error class + normalised message);
    it is *repeated* when that signature was already seen in an earlier run.

    - ``repeated_rate``: repeated errors / all errors in the period;
    - ``repeated_per_run``: repeated errors / runs created in the period (what a run costs us
      in mistakes we had already made once).
    """
    rows = (
        error_steps(window)
        .annotate(period=window.trunc("run__created_at"))
        .values("period")
        .annotate(**_error_aggregates())
        .order_by("period")
    )
    runs = {
        r["period"]: r["runs"]
        for r in _by_period(
            window,
            window.runs().annotate(period=window.trunc("created_at")).values("period").annotate(runs=Count("id")),
            {"runs": 0},
        )
    }
    out = _by_period(window, rows, {"errors": 0, "repeated": 0, "runs_with_repeated": 0})
    for row in out:
        row["runs"] = runs[row["period"]]
        row["repeated_rate"] = _rate(row["repeated"], row["errors"])
        row["repeated_per_run"] = _rate(row["repeated"], row["runs"])
    return out


def repeated_error_summary(window: Window) -> dict:
    row = error_steps(window).aggregate(**_error_aggregates())
    runs = window.runs().count()
    return {
        **row,
        "runs": runs,
        "repeated_rate": _rate(row["repeated"], row["errors"]),
        "repeated_per_run": _rate(row["repeated"], runs),
    }


# --- human interventions -----------------------------------------------------------------------
INTERVENTION_REASONS = ("confirmed", "human_scored", "retried", "cancelled")


def runs_with_intervention_flags(window: Window) -> QuerySet[Run]:
    """The window's runs, each flagged with why a person had to step in:

    - ``has_confirmation``: a sensitive tool call asked for a confirmation (a ``ToolConfirmation``);
    - ``has_human_score``: a reviewer scored it (a human ``Evaluation``: a score override);
    - ``has_retry``: someone asked for it again (another run's ``retry_of`` points at it);
    - ``cancelled``: a user cancelled it (status *cancelled*).
    """
    return window.runs().annotate(
        has_confirmation=Exists(ToolConfirmation.objects.filter(run=OuterRef("pk"))),
        has_human_score=Exists(Evaluation.objects.filter(run=OuterRef("pk"), kind=Evaluation.Kind.HUMAN)),
        has_retry=Exists(Run.objects.filter(retry_of=OuterRef("pk"))),
    )


_NEEDED_A_PERSON = (
    Q(has_confirmation=True) | Q(has_human_score=True) | Q(has_retry=True) | Q(status=Run.Status.CANCELLED)
)


def _intervention_aggregates() -> dict:
    return {
        "runs": Count("id"),
        "intervened": Count("id", filter=_NEEDED_A_PERSON),
        "confirmed": Count("id", filter=Q(has_confirmation=True)),
        "human_scored": Count("id", filter=Q(has_human_score=True)),
        "retried": Count("id", filter=Q(has_retry=True)),
        "cancelled": Count("id", filter=Q(status=Run.Status.CANCELLED)),
    }


def intervention_trend(window: Window) -> list[dict]:
    """**Human-intervention rate** per period: runs that needed a person for at least one of
    the reasons above / all runs created in the period. A run counts once, however many
    reasons it has; the per-reason counts are given too."""
    rows = (
        runs_with_intervention_flags(window)
        .annotate(period=window.trunc("created_at"))
        .values("period")
        .annotate(**_intervention_aggregates())
        .order_by("period")
    )
    empty = dict.fromkeys(("runs", "intervened", *INTERVENTION_REASONS), 0)
    out = _by_period(window, rows, empty)
    for row in out:
        row["rate"] = _rate(row["intervened"], row["runs"])
    return out


def intervention_summary(window: Window) -> dict:
    row = runs_with_intervention_flags(window).aggregate(**_intervention_aggregates())
    return {**row, "rate": _rate(row["intervened"], row["runs"])}


# --- tools -------------------------------------------------------------------------------------
class PercentileCont(Aggregate):
    """PostgreSQL's ``percentile_cont(p) WITHIN GROUP (ORDER BY x)``: the interpolated p-th
    percentile, computed by the database."""

    function = "PERCENTILE_CONT"
    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)"
    output_field = FloatField()

    def __init__(self, expression, fraction: float, **extra) -> None:
        if not 0 <= float(fraction) <= 1:
            raise ValueError("A percentile is a fraction between 0 and 1.")
        super().__init__(expression, fraction=repr(float(fraction)), **extra)


def percentile_cont(values: list[float], fraction: float) -> float | None:
    """The same interpolation as ``percentile_cont`` for databases without it (SQLite)."""
    if not values:
        return None
    ordered = sorted(values)
    position = fraction * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def tool_stats(window: Window) -> list[dict]:
    """**Per-tool** figures over the tool calls of the window's runs:

    - calls: tool-call steps (a cached answer is a call too);
    - success rate: calls that succeeded / calls;
    - latency p50 / p95: the interpolated percentiles (``percentile_cont``) of ``duration_ms``;
    - retries: extra attempts, the sum of ``attempts - 1``.
    """
    calls = Step.objects.filter(run__in=window.runs(), kind=Step.Kind.TOOL_CALL).exclude(tool_name="")
    aggregates = {
        "calls": Count("id"),
        "succeeded": Count("id", filter=Q(success=True)),
        "retries": Sum(F("attempts") - 1),
        "avg_ms": Avg("duration_ms"),
    }
    postgres = connection.vendor == "postgresql"
    if postgres:
        aggregates["p50_ms"] = PercentileCont("duration_ms", 0.5)
        aggregates["p95_ms"] = PercentileCont("duration_ms", 0.95)
    rows = list(calls.values("tool_name").annotate(**aggregates).order_by("-calls", "tool_name"))
    for row in rows:
        row["success_rate"] = _rate(row["succeeded"], row["calls"])
        if not postgres:
            durations = list(
                calls.filter(tool_name=row["tool_name"], duration_ms__isnull=False).values_list(
                    "duration_ms", flat=True
                )
            )
            row["p50_ms"] = percentile_cont(durations, 0.5)
            row["p95_ms"] = percentile_cont(durations, 0.95)
    return rows


# --- strategies ----------------------------------------------------------------------------------
def strategy_effectiveness(window: Window) -> dict:
    """**Strategy effectiveness ratio**: strategies that finished their trial in the window with
    a measured improvement (the 95% confidence interval of treatment minus control above zero,
    recorded with the decision) / all strategies that finished a trial in the window (promoted,
    rolled back by a reviewer, or rolled back automatically)."""
    from feedback.models import StrategyEvent

    finished = StrategyEvent.objects.filter(
        created_at__gte=window.since,
        created_at__lt=window.until,
        from_status="trial",
        action__in=[StrategyEvent.Action.PROMOTE, StrategyEvent.Action.ROLL_BACK, StrategyEvent.Action.AUTO_ROLL_BACK],
    )
    row = finished.aggregate(finished=Count("id"), improved=Count("id", filter=Q(snapshot__trial__improved=True)))
    return {**row, "ratio": _rate(row["improved"], row["finished"])}
