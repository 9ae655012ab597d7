"""The metric definitions: each written down once, here, and documented in the README (Metric definitions).

Every metric is computed by the database (annotate/aggregate, TruncDay/TruncWeek), never by a
Python loop over runs. The trends read whole days from the DailyRunStats rollups, which are
counted by the very queries below (feedback/rollups.py), and count the partial days at the
window's edges live; Python only adds up a few hundred per-period rows. The per-tool figures
follow the same pattern in feedback/tool_metrics.py.

A run belongs to the period of its ``created_at``; the filters are a window ``[since, until)``
and optionally one task kind. Rates are ``None`` when their
denominator is zero (no data is not a rate of 0).
"""

from dataclasses import dataclass, replace
from datetime import date, datetime, timedelta
from datetime import time as dt_time

from django.db.models import (
    Count,
    DateField,
    Exists,
    F,
    OuterRef,
    Q,
    QuerySet,
    Sum,
)
from django.db.models.functions import Trunc, TruncDay, TruncWeek
from django.utils import timezone

from feedback.models import (
    DailyRunStats,
    DailyToolLatency,
    DailyToolStats,
    Evaluation,
    MonthlyToolLatency,
    MonthlyToolStats,
    Run,
    Step,
    StrategyEvent,
    Task,
    ToolConfirmation,
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


# --- the per-period counts behind the trends ----------------------------------------------------
# Each trend is built from additive counts per period. Whole days come from the DailyRunStats
# rollups; the partial days at the window's edges (and the rollups themselves) are counted by
# the queries below, so there is one definition of each count.
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
_ENDED = Q(status__in=ENDED)


def run_counts(window: Window, *, by: tuple[str, ...] = ("period",)) -> QuerySet:
    """Per period (and ``by`` columns): ``runs`` created; of those ``ended``, ``succeeded``
    (ended with a final answer), ``accomplished`` (ended, outcome accomplished), ``judged``
    (ended, outcome known), ``scored`` and ``score_sum``, ``costed`` and ``cost_sum`` over the
    ended ones; and the human interventions."""
    return (
        runs_with_intervention_flags(window)
        .annotate(period=window.trunc("created_at"))
        .values(*by)
        .annotate(
            runs=Count("id"),
            ended=Count("id", filter=_ENDED),
            succeeded=Count("id", filter=Q(status=Run.Status.SUCCEEDED)),
            accomplished=Count("id", filter=_ENDED & Q(outcome=Run.Outcome.ACCOMPLISHED)),
            judged=Count("id", filter=_ENDED & ~Q(outcome=Run.Outcome.UNKNOWN)),
            scored=Count("id", filter=_ENDED & Q(score__isnull=False)),
            score_sum=Sum("score", filter=_ENDED),
            intervened=Count("id", filter=_NEEDED_A_PERSON),
            confirmed=Count("id", filter=Q(has_confirmation=True)),
            human_scored=Count("id", filter=Q(has_human_score=True)),
            retried=Count("id", filter=Q(has_retry=True)),
            cancelled=Count("id", filter=Q(status=Run.Status.CANCELLED)),
            costed=Count("id", filter=_ENDED & Q(cost__isnull=False)),
            cost_sum=Sum("cost", filter=_ENDED),
        )
        .order_by()
    )


def error_groups(window: Window, *, by: tuple[str, ...] = ()) -> QuerySet[Step]:
    """The errors of the window's runs (steps with an error signature), one row per run and
    signature (and ``by`` columns, with ``period`` and ``task_kind`` read from the run): ``errors``
    steps, flagged ``is_repeated`` when a step of an EARLIER run (by ``created_at``, then id) had
    the same signature; earlier means any time before, inside the window or not, and of any task
    kind. The flag is the same for every error of one run with one signature, so it is
    annotated after the grouping: the database evaluates it once a group, not once an error (a
    long run hits the same error hundreds of times)."""
    # The exclude is a no-op for the result but lets PostgreSQL use the partial index
    # step_error_signature (it cannot prove the outer signature is not empty on its own).
    earlier = (
        Step.objects.filter(error_signature=OuterRef("error_signature"))
        .exclude(error_signature="")
        .filter(
            Q(run__created_at__lt=OuterRef("created"))
            | Q(run__created_at=OuterRef("created"), run_id__lt=OuterRef("run_id"))
        )
    )
    # The run's created_at by an annotation of its own: Django would group by the flag itself
    # (once an error again) were it referred to across the relation (OuterRef("run__created_at")).
    return (
        Step.objects.filter(run__in=window.runs())
        .exclude(error_signature="")
        .annotate(period=window.trunc("run__created_at"), task_kind=F("run__task_kind"), created=F("run__created_at"))
        .values(*by, "run_id", "error_signature")
        .annotate(errors=Count("id"))
        .annotate(is_repeated=Exists(earlier))
        .order_by()
    )


ERROR_COUNTS = ("errors", "repeated_errors", "runs_with_repeated")


def error_counts(window: Window, *, by: tuple[str, ...] = ("period",)) -> list[dict]:
    """Per period (and ``by`` columns, with ``task_kind`` read from the run): ``errors``,
    ``repeated_errors`` and ``runs_with_repeated``, added up from the window's ``error_groups``
    (a few per run)."""
    found: dict[tuple, dict] = {}
    repeating: dict[tuple, set[int]] = {}
    for row in error_groups(window, by=by):
        key = tuple(row[name] for name in by)
        counts = found.get(key)
        if counts is None:
            counts = found[key] = {name: row[name] for name in by} | dict.fromkeys(ERROR_COUNTS, 0)
        counts["errors"] += row["errors"]
        if row["is_repeated"]:
            counts["repeated_errors"] += row["errors"]
            repeating.setdefault(key, set()).add(row["run_id"])
    for key, runs in repeating.items():
        found[key]["runs_with_repeated"] = len(runs)
    return list(found.values())


def _period_key(value: date | datetime) -> date:
    return timezone.localtime(value).date() if isinstance(value, datetime) else value


def _add(into: dict, rows) -> None:
    for row in rows:
        totals = into.setdefault(_period_key(row.pop("period")), dict.fromkeys(DailyRunStats.COUNTS, 0))
        for name, value in row.items():
            if name in totals:
                totals[name] += value or 0


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


def period_counts(window: Window) -> list[dict]:
    """Every count of DailyRunStats per period of the window, every period present. A page that
    shows several trends computes this once and passes it to each as ``counts``."""
    found: dict[date, dict] = {}
    edges, first, last = split_window(window)
    if first is not None:
        rollups = whole_days(DailyRunStats, window, first, last)
        period = Trunc("day", window.granularity, output_field=DateField())
        _add(
            found,
            rollups.annotate(period=period)
            .values("period")
            .annotate(**{c: Sum(c) for c in DailyRunStats.COUNTS})
            .order_by(),
        )
    for edge in edges:
        _add(found, run_counts(edge))
        _add(found, error_counts(edge))
    empty = dict.fromkeys(DailyRunStats.COUNTS, 0)
    return [{"period": p, **found.get(p, empty)} for p in window.periods()]


def _total(rows: list[dict]) -> dict:
    return {c: sum(r[c] for r in rows) for c in DailyRunStats.COUNTS}


# --- average score and success rate ------------------------------------------------------------
def _score_figures(c: dict) -> dict:
    return {
        "runs": c["ended"],
        "scored": c["scored"],
        "avg_score": c["score_sum"] / c["scored"] if c["scored"] else None,
        "succeeded": c["succeeded"],
        "accomplished": c["accomplished"],
        "unknown": c["ended"] - c["judged"],
        "success_rate": rate(c["accomplished"], c["ended"]),
    }


def score_trend(window: Window, counts: list[dict] | None = None) -> list[dict]:
    """**Average score** and **success rate** per period, over the runs that have ended.

    - average score: mean of ``Run.score`` (the composite, where a human score outranks the
      evaluators) over the ended runs that have a score;
    - success rate: ended runs whose **outcome is accomplished** (the task done, by the outcome
      rule of feedback/evaluation/chain.py) / all ended runs (answered, failed, cancelled). A run
      whose outcome is unknown (not evaluated yet, no verdict) counts in the denominator, never
      in the numerator: the rate cannot rise by not judging. ``unknown`` says how many there
      are. A run that merely ended with an answer (status *succeeded*, "Answered") is not a
      success: ``succeeded`` still counts those, apart. Queued and running runs are left out.
    """
    return [{"period": c["period"], **_score_figures(c)} for c in counts or period_counts(window)]


def score_summary(window: Window, counts: list[dict] | None = None) -> dict:
    """The same two figures over the whole window."""
    return _score_figures(_total(counts or period_counts(window)))


# --- repeated errors -------------------------------------------------------------------------
def _error_figures(c: dict) -> dict:
    return {
        "errors": c["errors"],
        "repeated": c["repeated_errors"],
        "runs_with_repeated": c["runs_with_repeated"],
        "runs": c["runs"],
        "repeated_rate": rate(c["repeated_errors"], c["errors"]),
        "repeated_per_run": rate(c["repeated_errors"], c["runs"]),
    }


def repeated_error_trend(window: Window, counts: list[dict] | None = None) -> list[dict]:
    """**Repeated-error rate** per period.

    An error is a step with an ``error_signature`` (tool + error class + normalised message);
    it is *repeated* when that signature was already seen in an earlier run.

    - ``repeated_rate``: repeated errors / all errors in the period;
    - ``repeated_per_run``: repeated errors / runs created in the period (what a run costs us
      in mistakes we had already made once).
    """
    return [{"period": c["period"], **_error_figures(c)} for c in counts or period_counts(window)]


def repeated_error_summary(window: Window, counts: list[dict] | None = None) -> dict:
    return _error_figures(_total(counts or period_counts(window)))


# --- human interventions -----------------------------------------------------------------------
def _intervention_figures(c: dict) -> dict:
    return {
        "runs": c["runs"],
        "intervened": c["intervened"],
        **{reason: c[reason] for reason in INTERVENTION_REASONS},
        "rate": rate(c["intervened"], c["runs"]),
    }


def intervention_trend(window: Window, counts: list[dict] | None = None) -> list[dict]:
    """**Human-intervention rate** per period: runs that needed a person for at least one of
    the reasons above / all runs created in the period. A run counts once, however many
    reasons it has; the per-reason counts are given too."""
    return [{"period": c["period"], **_intervention_figures(c)} for c in counts or period_counts(window)]


def intervention_summary(window: Window, counts: list[dict] | None = None) -> dict:
    return _intervention_figures(_total(counts or period_counts(window)))


# --- cost ----------------------------------------------------------------------------------------
def _cost_figures(c: dict) -> dict:
    return {
        "ended": c["ended"],
        "costed": c["costed"],
        "unpriced": c["ended"] - c["costed"],
        "cost": c["cost_sum"] if c["costed"] else None,
        "cost_per_run": rate(c["cost_sum"], c["costed"]),
    }


def cost_trend(window: Window, counts: list[dict] | None = None) -> list[dict]:
    """**Cost** per period, in US dollars: the sum of the ended runs' costs (each run's model
    calls at its model's price when they were made: feedback/costs.py), and the cost per run
    over the runs that have one. A run whose model has no price is *unpriced*: counted apart,
    never as a cost of 0."""
    return [{"period": c["period"], **_cost_figures(c)} for c in counts or period_counts(window)]


def cost_summary(window: Window, counts: list[dict] | None = None) -> dict:
    return _cost_figures(_total(counts or period_counts(window)))


_COST_COUNTS = ("ended", "costed", "cost_sum")


def cost_by_kind(window: Window) -> list[dict]:
    """The cost figures over the window for each task kind that had ended runs (the window's own
    kind only, if it has one), most expensive first: the rollups grouped by kind, and the live
    parts likewise."""
    found: dict[str, dict] = {}

    def add(rows) -> None:
        for row in rows:
            totals = found.setdefault(row["task_kind"], dict.fromkeys(_COST_COUNTS, 0))
            for name in _COST_COUNTS:
                totals[name] += row[name] or 0

    live, first, last = split_window(window)
    if first is not None:
        rollups = whole_days(DailyRunStats, window, first, last).values("task_kind")
        add(rollups.annotate(**{name: Sum(name) for name in _COST_COUNTS}).order_by())
    for part in live:
        add(run_counts(part, by=("task_kind",)))
    labels = dict(Task.Kind.choices)
    rows = [
        {"kind": kind, "label": labels.get(kind, kind), **_cost_figures(totals)}
        for kind, totals in found.items()
        if totals["ended"]
    ]
    return sorted(rows, key=lambda row: (-(row["cost"] or 0), row["kind"]))


# --- strategies ----------------------------------------------------------------------------------
def strategy_effectiveness(window: Window) -> dict:
    """**Strategy effectiveness ratio**: strategies that finished their trial in the window with
    a measured improvement (the always-valid 95% interval of treatment minus control above zero,
    recorded with the decision; see strategies/trials.py) / all strategies that finished a trial
    in the window (promoted, rolled back by a reviewer, or rolled back automatically)."""

    finished = StrategyEvent.objects.filter(
        created_at__gte=window.since,
        created_at__lt=window.until,
        from_status="trial",
        action__in=[StrategyEvent.Action.PROMOTE, StrategyEvent.Action.ROLL_BACK, StrategyEvent.Action.AUTO_ROLL_BACK],
    )
    row = finished.aggregate(finished=Count("id"), improved=Count("id", filter=Q(snapshot__trial__improved=True)))
    return {**row, "ratio": rate(row["improved"], row["finished"])}
