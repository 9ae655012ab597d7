"""The additive counts per period that every run trend is built from, live and from the rollups."""

from datetime import date, datetime

from django.db.models import Count, DateField, Exists, F, OuterRef, Q, QuerySet, Sum
from django.db.models.functions import Trunc
from django.utils import timezone

from feedback.models import DailyRunStats, Evaluation, Run, Step, ToolConfirmation

from .window import ENDED, Window, split_window, whole_days

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
