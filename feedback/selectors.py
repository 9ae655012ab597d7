"""The read queries behind the pages."""

from datetime import datetime

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import (
    BooleanField,
    Exists,
    ExpressionWrapper,
    F,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
)
from django.db.models.functions import Coalesce

from feedback.models import Evaluation, EvaluationProfile, Run, Step, Strategy


def runs_visible_to(user: AbstractBaseUser) -> QuerySet[Run]:
    """Operators and reviewers see every run; staff see the runs of their own tasks."""
    runs = Run.objects.all()
    if not user.has_perm("feedback.view_run"):
        runs = runs.filter(task__created_by=user)
    return runs


def run_list(user: AbstractBaseUser, *, status: str = "", kind: str = "") -> QuerySet[Run]:
    runs = runs_visible_to(user).select_related("task", "task__created_by").order_by("-created_at", "-id")
    if status:
        runs = runs.filter(status=status)
    if kind:
        runs = runs.filter(task_kind=kind)
    return runs


def run_list_page(
    user: AbstractBaseUser,
    *,
    status: str = "",
    kind: str = "",
    before: tuple[datetime, int] | None = None,
    size: int = 50,
) -> tuple[list[Run], tuple[datetime, int] | None]:
    """One page of the run list for keyset pagination: the ``size`` runs just older than the
    cursor ``before`` = (created_at, id) of the previous page's last run, and the cursor of the
    next page (None on the last one). No COUNT, no OFFSET: a range scan of run_recent,
    run_status_recent or run_kind_recent, as fast on page 20,000 as on page 1."""
    runs = run_list(user, status=status, kind=kind)
    if before is not None:
        created_at, pk = before
        # ``created_at <= x`` is the index condition; the OR only settles ties inside it.
        runs = runs.filter(created_at__lte=created_at).filter(Q(created_at__lt=created_at) | Q(pk__lt=pk))
    page = list(runs[: size + 1])  # one more than shown says whether a next page exists
    more = len(page) > size
    page = page[:size]
    return page, ((page[-1].created_at, page[-1].pk) if more else None)


def run_steps(run: Run) -> QuerySet[Step]:
    return run.steps.order_by("index").prefetch_related("attempt_rows")


def strategy_list(*, status: str = "") -> QuerySet[Strategy]:
    strategies = Strategy.objects.select_related("current_version").order_by("-updated_at")
    if status:
        strategies = strategies.filter(status=status)
    return strategies


# --- evaluation -----------------------------------------------------------------------------
# Judge and rule scores further apart than this mean the evaluators disagree: a person decides.
DISAGREEMENT = 0.5
LOW_SCORE = 0.5


def _latest_score(kind: str) -> Subquery:
    return Subquery(
        Evaluation.objects.filter(run=OuterRef("pk"), kind=kind, status=Evaluation.Status.OK)
        .order_by("-round", "-id")
        .values("score")[:1]
    )


def review_queue() -> QuerySet[Run]:
    """Ended runs no person has scored yet that need one, newest first: a composite score
    below the profile's ``review_below``, the judge and the rule evaluator disagreeing by more
    than ``DISAGREEMENT``, or an evaluator that failed in the latest round. Each run carries the
    flags that put it there."""
    latest_round = Subquery(
        Evaluation.objects.filter(run=OuterRef("pk"))
        .exclude(kind=Evaluation.Kind.HUMAN)
        .order_by("-round")
        .values("round")[:1]
    )
    runs = (
        Run.objects.exclude(status__in=Run.ACTIVE_STATUSES)
        .exclude(evaluations__kind=Evaluation.Kind.HUMAN)
        .annotate(
            judge_score=_latest_score(Evaluation.Kind.JUDGE),
            rule_score=_latest_score(Evaluation.Kind.RULE),
            latest_round=latest_round,
            # The kind's profile may set its own threshold; kinds without a profile use LOW_SCORE.
            review_below=Coalesce(
                Subquery(EvaluationProfile.objects.filter(task_kind=OuterRef("task_kind")).values("review_below")[:1]),
                Value(LOW_SCORE),
            ),
        )
        .annotate(
            evaluator_failed=Exists(
                Evaluation.objects.filter(
                    run=OuterRef("pk"), round=OuterRef("latest_round"), status=Evaluation.Status.FAILED
                )
            ),
            low_score=ExpressionWrapper(Q(score__lt=F("review_below")), output_field=BooleanField()),
            disagreement=ExpressionWrapper(
                Q(judge_score__gt=F("rule_score") + DISAGREEMENT) | Q(rule_score__gt=F("judge_score") + DISAGREEMENT),
                output_field=BooleanField(),
            ),
        )
    )
    return (
        runs.filter(Q(low_score=True) | Q(disagreement=True) | Q(evaluator_failed=True))
        .select_related("task")
        .order_by("-created_at", "-id")
    )


def run_evaluations(run: Run) -> QuerySet[Evaluation]:
    """Every evaluation of the run, newest round first: the history the run page shows."""
    return run.evaluations.select_related("author").order_by("-round", "kind", "id")
