"""The runs a person should score, and a run's evaluations."""

from django.db.models import (
    BooleanField,
    Exists,
    ExpressionWrapper,
    F,
    OuterRef,
    Prefetch,
    Q,
    QuerySet,
    Subquery,
    Value,
    prefetch_related_objects,
)
from django.db.models.functions import Coalesce

from feedback.models import Evaluation, EvaluationProfile, Run, ScoreValue

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
    """Ended runs no person has scored yet that need one, newest first: the task not
    accomplished (whatever the score: an answer that gives up can score high), a composite score
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
        # People's runs: an experiment's runs are judged by their items' checkers, not queued here.
        Run.objects.filter(purpose=Run.Purpose.PRODUCTION)
        .exclude(status__in=Run.ACTIVE_STATUSES)
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
            not_accomplished=ExpressionWrapper(Q(outcome=Run.Outcome.NOT_ACCOMPLISHED), output_field=BooleanField()),
            low_score=ExpressionWrapper(Q(score__lt=F("review_below")), output_field=BooleanField()),
            disagreement=ExpressionWrapper(
                Q(judge_score__gt=F("rule_score") + DISAGREEMENT) | Q(rule_score__gt=F("judge_score") + DISAGREEMENT),
                output_field=BooleanField(),
            ),
        )
    )
    return (
        runs.filter(Q(not_accomplished=True) | Q(low_score=True) | Q(disagreement=True) | Q(evaluator_failed=True))
        .select_related("task")
        .order_by("-created_at", "-id")
    )


def run_evaluations(run: Run) -> list[Evaluation]:
    """Every evaluation of the run, newest round first: the history the run page shows. Score
    values are a reviewer's: read for the human evaluations alone (most runs have none)."""
    evaluations = list(run.evaluations.select_related("author").order_by("-round", "kind", "id"))
    values = Prefetch("score_values", ScoreValue.objects.select_related("config"))
    prefetch_related_objects([e for e in evaluations if e.kind == Evaluation.Kind.HUMAN], values)
    return evaluations
