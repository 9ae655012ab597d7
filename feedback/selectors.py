"""The read queries behind the pages."""

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


# --- strategies -------------------------------------------------------------------------------
def strategy_prompt_diff(strategy: Strategy) -> dict:
    """The exact system prompt of a sample matching task, without and with the strategy."""
    import difflib

    from feedback.agent.prompts import build_system_prompt
    from feedback.strategies.injection import select

    version = strategy.current_version
    sample = strategy.evidence.select_related("task").order_by("-pk").first()
    if version is None or sample is None:
        return {"sample": None, "lines": []}
    others = select(sample, exclude=strategy.pk)
    before = build_system_prompt(others.guidance, others.examples)
    examples = others.examples + ([version.worked_example] if version.worked_example else [])
    after = build_system_prompt([*others.guidance, version.new_guidance], examples)
    lines = []
    for line in difflib.unified_diff(before.splitlines(), after.splitlines(), "before", "after", n=2, lineterm=""):
        if line.startswith(("---", "+++")):
            continue
        kind = (
            "add" if line.startswith("+") else "del" if line.startswith("-") else "hunk" if line.startswith("@") else ""
        )
        lines.append({"kind": kind, "text": line})
    return {"sample": sample, "before": before, "after": after, "lines": lines}


def strategy_detail(strategy_id: int) -> Strategy:
    from django.shortcuts import get_object_or_404

    return get_object_or_404(
        Strategy.objects.select_related("current_version", "current_version__author"), pk=strategy_id
    )
