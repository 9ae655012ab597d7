"""What every pattern kind of the mining job shares: a pattern and the contrast it rests on, its
failing runs against its succeeding runs (mining.py says which runs are which), counted over the
window's runs, steps and evaluations.

Its own module so that mining.py and replies.py (one pattern kind, called by mine()) both import
it without importing each other.
"""

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.conf import settings
from django.db.models import Count, Min, Q, QuerySet

from feedback.models import Evaluation, Run, Step

EVIDENCE_LIMIT = 200
# "All history" as a lower bound the SQL can compare with: before any run.
BEGINNING = datetime(1, 1, 1, tzinfo=UTC)


@dataclass
class Pattern:
    kind: str  # a Strategy.PatternKind value
    key: str  # identity: the same pattern mined again merges into the same strategy
    task_kind: str
    failing_with: int
    failing_total: int
    succeeding_with: int
    succeeding_total: int
    details: dict = field(default_factory=dict)
    evidence: list[int] = field(default_factory=list)
    # The window it was mined over: the last ``window_days`` days (None: all history) from
    # ``since`` (None: the beginning).
    window_days: int | None = None
    since: datetime | None = None
    # The miner's own keys a proposal's pattern was grouped from (strategies/identity.py).
    mined_keys: list[str] = field(default_factory=list)

    @property
    def lift(self) -> float:
        """The share of failing runs that show it minus the share of succeeding runs that do (the
        miner's contrast: what keeps out what every run does)."""
        return self.failing_with / max(1, self.failing_total) - self.succeeding_with / max(1, self.succeeding_total)

    def failure_lift(self) -> dict | None:
        """The pattern's lift as a reviewer reads it: the failure rate of the counted runs that show
        it minus that of those that do not, with a 95% interval (Agresti–Caffo: one failure and one
        success added to each side, so small counts give a wide interval, not a certain one).
        None when either side has no run: there is nothing to compare with."""
        with_n = self.failing_with + self.succeeding_with
        without_failing = max(0, self.failing_total - self.failing_with)
        without_n = without_failing + max(0, self.succeeding_total - self.succeeding_with)
        if with_n == 0 or without_n == 0:
            return None
        rate_with, rate_without = self.failing_with / with_n, without_failing / without_n
        a, b = (self.failing_with + 1) / (with_n + 2), (without_failing + 1) / (without_n + 2)
        half = 1.96 * math.sqrt(a * (1 - a) / (with_n + 2) + b * (1 - b) / (without_n + 2))
        return {
            "value": round(rate_with - rate_without, 3),
            "low": round(max(-1.0, a - b - half), 3),
            "high": round(min(1.0, a - b + half), 3),
            "rate_with": round(rate_with, 3),
            "rate_without": round(rate_without, 3),
            "n_with": with_n,
            "n_without": without_n,
        }

    @property
    def confidence(self) -> float | None:
        """What a proposal shows as its confidence: the failure lift (None: not measurable)."""
        lift = self.failure_lift()
        return None if lift is None else lift["value"]

    def contrast(self) -> dict:
        return {
            "failing_with": self.failing_with,
            "failing_total": self.failing_total,
            "succeeding_with": self.succeeding_with,
            "succeeding_total": self.succeeding_total,
            "lift": round(self.lift, 3),
            "confidence": self.confidence,
            "failure_lift": self.failure_lift(),
            "window_days": self.window_days,
            "since": self.since.isoformat() if self.since else None,
            **self.details,
        }

    def window_text(self) -> str:
        """The window in words, for the audit log."""
        if self.window_days is None:
            return "over all history"
        return f"over the last {self.window_days} day(s), since {self.since:%Y-%m-%d %H:%M} UTC"


def _pattern(
    kind: str, key: str, task_kind: str, failing: int, succeeding: int, totals: dict, details: dict
) -> Pattern:
    failing_total, succeeding_total = totals.get(task_kind, (0, 0))
    return Pattern(kind, key, task_kind, failing, failing_total, succeeding, succeeding_total, details)


# The outcome is evidence (a checker, a reference, a configured judge or a person: evaluation/
# chain.py); the score mixes in heuristics, so it decides only where the outcome is unknown. A
# right answer the heuristic judge scored low (a short "7" for "how many lines") is a success to
# learn from, never a failure to mine.
def _failing(prefix: str = "") -> Q:
    return (
        Q(**{f"{prefix}outcome": Run.Outcome.NOT_ACCOMPLISHED})
        | Q(**{f"{prefix}status": Run.Status.FAILED})
        | Q(**{f"{prefix}outcome": Run.Outcome.UNKNOWN, f"{prefix}score__lt": settings.STRATEGY_LOW_SCORE})
    )


def _succeeding(prefix: str = "") -> Q:
    return Q(**{f"{prefix}status": Run.Status.SUCCEEDED, f"{prefix}outcome": Run.Outcome.ACCOMPLISHED})


def _counted(prefix: str = "") -> Q:
    """The runs a contrast counts, failing or succeeding: the others add to neither count, so the
    scans leave them (and their steps) out before they group. A group that only they show has no
    failing run, below any STRATEGY_MIN_SUPPORT of at least one, and was never a pattern."""
    return _failing(prefix) | _succeeding(prefix)


def _keep(pattern: Pattern) -> bool:
    return pattern.failing_with >= settings.STRATEGY_MIN_SUPPORT and pattern.lift >= settings.STRATEGY_MIN_LIFT


def _window_runs(since: datetime) -> QuerySet[Run]:
    # Production runs only: an experiment's or a playground's runs are measured apart, never mined.
    runs = Run.objects.filter(purpose=Run.Purpose.PRODUCTION)
    return runs if since == BEGINNING else runs.filter(created_at__gte=since)


# Rows of a run's steps read by run (evidence, remedies) are bounded by the window twice: by a semi-join on the
# run ids the window's creation times select (an index range scan of run_recent), which lets
# PostgreSQL read those runs' rows by their run index (nested loops), and by the joined run's own
# created_at, so that join reads the window's runs by the index too. Bounded by the join alone,
# PostgreSQL read every error step of the history through the partial error-signature index and
# dropped the old ones after (1.4 s instead of 0.1 s for 30 days of a 200,000-run history).
def _window_steps(since: datetime) -> QuerySet[Step]:
    if since == BEGINNING:
        return Step.objects.filter(run__purpose=Run.Purpose.PRODUCTION)
    return Step.objects.filter(
        run_id__in=_window_runs(since).values("id"), run__created_at__gte=since, run__purpose=Run.Purpose.PRODUCTION
    )


# The grouping scans of mine() (each step or evaluation of the window once, grouped) are bounded
# by the join alone: they read their rows from an index of the kind's own (step_mining_*, an
# index-only scan for the errors) or the whole evaluation table, and hash-join the window's runs,
# where the semi-join above only added a probe of the run index for each row (for a year at a
# million runs, 2.3 s of the error signatures' 4.1 s).
def _grouped_steps(since: datetime) -> QuerySet[Step]:
    steps = Step.objects.filter(run__purpose=Run.Purpose.PRODUCTION)
    return steps if since == BEGINNING else steps.filter(run__created_at__gte=since)


def _grouped_evaluations(since: datetime) -> QuerySet[Evaluation]:
    evaluations = Evaluation.objects.filter(run__purpose=Run.Purpose.PRODUCTION)
    return evaluations if since == BEGINNING else evaluations.filter(run__created_at__gte=since)


def _failing_steps_contrast() -> dict:
    """Per group of steps: the failing and the succeeding runs that have one, and an example error."""
    return {
        "failing": Count("run", distinct=True, filter=_failing("run__")),
        "succeeding": Count("run", distinct=True, filter=_succeeding("run__")),
        "example": Min("error"),
    }
