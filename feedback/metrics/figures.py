"""The figures the metrics page and the API show: each a few sums of the per-period counts."""

from collections.abc import Callable

from django.db.models import Count, Q, Sum

from feedback.models import DailyRunStats, StrategyEvent, Task

from .counts import INTERVENTION_REASONS, period_counts, run_counts
from .window import Window, rate, split_window, whole_days


def _total(rows: list[dict]) -> dict:
    return {c: sum(r[c] for r in rows) for c in DailyRunStats.COUNTS}


def _per_period(figures: Callable[[dict], dict], window: Window, counts: list[dict] | None) -> list[dict]:
    """``figures`` of each period's counts (``counts``, or the window's own)."""
    return [{"period": c["period"], **figures(c)} for c in counts or period_counts(window)]


def _over_window(figures: Callable[[dict], dict], window: Window, counts: list[dict] | None) -> dict:
    """``figures`` of the whole window's counts added up."""
    return figures(_total(counts or period_counts(window)))


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
    return _per_period(_score_figures, window, counts)


def score_summary(window: Window, counts: list[dict] | None = None) -> dict:
    """The same two figures over the whole window."""
    return _over_window(_score_figures, window, counts)


# --- repeated errors -------------------------------------------------------------------------
def _error_figures(c: dict) -> dict:
    return {
        "errors": c["errors"],
        "repeated": c["repeated_errors"],
        "runs_with_repeated": c["runs_with_repeated"],
        "runs": c["runs"],
        "repeated_rate": rate(c["repeated_errors"], c["errors"]),
        "repeated_per_run": rate(c["repeated_errors"], c["runs"]),
        "guardrail_refusals": c["guardrail_refusals"],
        "human_rejections": c["human_rejections"],
    }


def repeated_error_trend(window: Window, counts: list[dict] | None = None) -> list[dict]:
    """**Repeated-error rate** per period.

    An error is a failed tool call or a model error, never a refusal (the one definition:
    feedback/metrics/errors.py); it is *repeated* when its signature (tool + error class +
    normalised message) was already seen in an earlier run.

    - ``repeated_rate``: repeated errors / all errors in the period;
    - ``repeated_per_run``: repeated errors / runs created in the period (what a run costs us
      in mistakes we had already made once);
    - ``guardrail_refusals`` and ``human_rejections``: the calls a guardrail refused and those a
      reviewer refused to confirm, counted apart (neither is an error).
    """
    return _per_period(_error_figures, window, counts)


def repeated_error_summary(window: Window, counts: list[dict] | None = None) -> dict:
    return _over_window(_error_figures, window, counts)


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
    return _per_period(_intervention_figures, window, counts)


def intervention_summary(window: Window, counts: list[dict] | None = None) -> dict:
    return _over_window(_intervention_figures, window, counts)


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
    return _per_period(_cost_figures, window, counts)


def cost_summary(window: Window, counts: list[dict] | None = None) -> dict:
    return _over_window(_cost_figures, window, counts)


_COST_COUNTS = ("ended", "costed", "cost_sum")


def cost_by_kind(window: Window) -> list[dict]:
    """The cost figures over the window for each task kind that had ended runs (the window's own
    kind only, if it has one), most expensive first: the daily rows grouped by kind, and the
    live parts likewise."""
    found: dict[str, dict] = {}

    def add(rows) -> None:
        for row in rows:
            totals = found.setdefault(row["task_kind"], dict.fromkeys(_COST_COUNTS, 0))
            for name in _COST_COUNTS:
                totals[name] += row[name] or 0

    live, first, last = split_window(window)
    if first is not None:
        rows = whole_days(DailyRunStats, window, first, last).values("task_kind")
        add(rows.annotate(**{name: Sum(name) for name in _COST_COUNTS}).order_by())
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
    in the window (promoted, by the verdict or against it, rolled back by a reviewer, or rolled back
    automatically)."""

    finished = StrategyEvent.objects.filter(
        created_at__gte=window.since,
        created_at__lt=window.until,
        from_status="trial",
        action__in=[
            StrategyEvent.Action.PROMOTE,
            StrategyEvent.Action.PROMOTE_OVERRIDE,
            StrategyEvent.Action.ROLL_BACK,
            StrategyEvent.Action.AUTO_ROLL_BACK,
        ],
    )
    row = finished.aggregate(finished=Count("id"), improved=Count("id", filter=Q(snapshot__trial__improved=True)))
    return {**row, "ratio": rate(row["improved"], row["finished"])}
