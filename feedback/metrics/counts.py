"""The additive counts per period that every run trend is built from: counted live from the rows
by the queries below, and summed from the DailyRunStats rows (which the same queries wrote) for
the closed days."""

from datetime import date, datetime

from django.db.models import Case, CharField, Count, DateField, Exists, F, OuterRef, Q, QuerySet, Sum, Value, When
from django.db.models.functions import Trunc
from django.utils import timezone

from feedback.models import DailyRunStats, Evaluation, Run, Step, ToolConfirmation

from .errors import ERROR_STEP, GUARDRAIL_REFUSAL, HUMAN_REJECTION, WENT_WRONG
from .window import ENDED, Window, split_window, whole_days

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


def _steps(window: Window) -> QuerySet[Step]:
    """The steps of the window's runs, with ``period`` and ``task_kind`` read from the run."""
    return Step.objects.filter(run__in=window.runs()).annotate(
        period=window.trunc("run__created_at"), task_kind=F("run__task_kind"), created=F("run__created_at")
    )


_CATEGORY = Case(
    When(GUARDRAIL_REFUSAL, then=Value("guardrail_refusals")),
    When(HUMAN_REJECTION, then=Value("human_rejections")),
    default=Value("errors"),
    output_field=CharField(),
)


def went_wrong_groups(window: Window, *, by: tuple[str, ...] = ()) -> QuerySet[Step]:
    """The steps that went wrong in the window's runs (errors.WENT_WRONG: the errors and the
    refusals), one row per run, signature and ``category`` (``errors``, ``guardrail_refusals``,
    ``human_rejections``; and ``by`` columns, with ``period`` and ``task_kind`` read from the
    run): ``steps``, and ``is_repeated`` (meant for errors) when a step of an EARLIER production run (by
    ``created_at``, then id) had the same signature; earlier means any time before, inside the
    window or not, and of any task kind. The flag is the same for every error of one run with one
    signature, so it is annotated after the grouping: the database evaluates it once a group, not
    once an error (a long run hits the same error hundreds of times). One pass over the partial
    index step_went_wrong, whatever the category."""
    # The run's created_at by an annotation of its own: Django would group by the flag itself
    # (once an error again) were it referred to across the relation (OuterRef("run__created_at")).
    return (
        _steps(window)
        .filter(WENT_WRONG)
        .annotate(category=_CATEGORY)
        .values(*by, "run_id", "error_signature", "category")
        .annotate(steps=Count("id"))
        # Exists alone (not inside a Case, which Django would add to the GROUP BY): refusals get a
        # flag too, which error_counts ignores, for a few extra checks.
        .annotate(is_repeated=Exists(_seen_earlier()))
        .order_by()
    )


def _seen_earlier() -> QuerySet[Step]:
    """The steps of an earlier production run with the outer group's signature (by the outer
    ``created`` and ``run_id``): what makes an error repeated."""
    # The exclude is a no-op for the result but lets PostgreSQL use the partial index
    # step_error_signature (it cannot prove the outer signature is not empty on its own).
    return (
        Step.objects.filter(error_signature=OuterRef("error_signature"), run__purpose=Run.Purpose.PRODUCTION)
        .exclude(error_signature="")
        .filter(
            Q(run__created_at__lt=OuterRef("created"))
            | Q(run__created_at=OuterRef("created"), run_id__lt=OuterRef("run_id"))
        )
    )


def run_error_counts(run_ids: list[int]) -> dict[int, dict]:
    """Per run of ``run_ids``, whatever its purpose: ``errors`` and ``repeated_errors`` by the one
    definition above (an error whose signature an earlier production run had). For runs measured
    apart from production (a dataset's held-out items), which no window counts."""
    rows = (
        Step.objects.filter(ERROR_STEP, run_id__in=run_ids)
        .annotate(created=F("run__created_at"))
        .values("run_id", "error_signature")
        .annotate(steps=Count("id"))
        .annotate(is_repeated=Exists(_seen_earlier()))
        .order_by()
    )
    counts = {run_id: {"errors": 0, "repeated_errors": 0} for run_id in run_ids}
    for row in rows:
        counts[row["run_id"]]["errors"] += row["steps"]
        if row["is_repeated"]:
            counts[row["run_id"]]["repeated_errors"] += row["steps"]
    return counts


def error_groups(window: Window, *, by: tuple[str, ...] = ()) -> QuerySet[Step]:
    """The errors alone (errors.ERROR_STEP) of ``went_wrong_groups``, ``steps`` of each."""
    return went_wrong_groups(window, by=by).filter(category="errors")


ERROR_COUNTS = ("errors", "repeated_errors", "runs_with_repeated", "guardrail_refusals", "human_rejections")


def error_counts(window: Window, *, by: tuple[str, ...] = ("period",)) -> list[dict]:
    """Per period (and ``by`` columns, with ``task_kind`` read from the run): ``errors``,
    ``repeated_errors`` and ``runs_with_repeated``, and, apart, ``guardrail_refusals`` and
    ``human_rejections``: added up from the window's ``went_wrong_groups`` (a few per run)."""
    found: dict[tuple, dict] = {}
    repeating: dict[tuple, set[int]] = {}
    for row in went_wrong_groups(window, by=by):
        key = tuple(row[name] for name in by)
        counts = found.get(key)
        if counts is None:
            counts = found[key] = {name: row[name] for name in by} | dict.fromkeys(ERROR_COUNTS, 0)
        counts[row["category"]] += row["steps"]
        if row["is_repeated"] and row["category"] == "errors":
            counts["repeated_errors"] += row["steps"]
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
    """Every count of DailyRunStats per period of the window, every period present: closed days
    from their rows, the rest counted live. A page that shows several trends computes this once
    and passes it to each as ``counts``."""
    found: dict[date, dict] = {}
    live, first, last = split_window(window)
    if first is not None:
        period = Trunc("day", window.granularity, output_field=DateField())
        rows = whole_days(DailyRunStats, window, first, last).annotate(period=period).values("period")
        _add(found, rows.annotate(**{c: Sum(c) for c in DailyRunStats.COUNTS}).order_by())
    for part in live:
        _add(found, run_counts(part))
        _add(found, error_counts(part))
    empty = dict.fromkeys(DailyRunStats.COUNTS, 0)
    return [{"period": p, **found.get(p, empty)} for p in window.periods()]
