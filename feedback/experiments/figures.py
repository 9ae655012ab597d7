"""The figures of an experiment's arms, beside its verdict: what the change cost and what else
it changed (the counter-metrics). Read from the arms' runs, ended ones only."""

from django.db.models import Avg, Count, DurationField, ExpressionWrapper, F, Q, Sum

from feedback.metrics.errors import GUARDRAIL_REFUSAL, run_had_error
from feedback.models import Experiment, Run, Step

ARMS = ("control", "treatment")


def _arm_runs(experiment: Experiment, arm: str):
    return Run.objects.filter(
        **{f"experiment_{arm}__experiment": experiment}, finished_at__isnull=False, purpose=Run.Purpose.EXPERIMENT
    )


def arm_figures(experiment: Experiment) -> dict[str, dict]:
    """Per arm: runs ended, checker passes, mean score, accomplished, errors, guardrail refusals,
    tokens, cost and seconds per run. JSON-ready: an ended experiment keeps it frozen."""
    figures = {}
    for arm in ARMS:
        runs = _arm_runs(experiment, arm)
        row = runs.aggregate(
            runs=Count("pk"),
            score=Avg("score"),
            accomplished=Count("pk", filter=Q(outcome=Run.Outcome.ACCOMPLISHED)),
            tokens=Avg(F("tokens_in") + F("tokens_out")),
            cost=Sum("cost"),
            seconds=Avg(ExpressionWrapper(F("finished_at") - F("started_at"), output_field=DurationField())),
        )
        passes = experiment.pairs.filter(**{f"{arm}_pass": 1.0}).count()
        errors = runs.filter(run_had_error()).count()
        refusals = Step.objects.filter(GUARDRAIL_REFUSAL, run__in=runs).count()
        n = row["runs"]
        seconds = row["seconds"]
        figures[arm] = {
            "runs": n,
            "passed": passes,
            "score": row["score"],
            "accomplished": row["accomplished"],
            "error_runs": errors,
            "guardrail_refusals": refusals,
            "tokens": row["tokens"],
            "cost": row["cost"],
            "seconds": seconds.total_seconds() if seconds is not None else None,
        }
    return figures


def experiment_progress(experiment: Experiment) -> dict:
    """Pairs in all, started, completed, and the wins, losses and ties so far."""
    pairs = experiment.pairs.aggregate(
        total=Count("pk"),
        started=Count("pk", filter=Q(control_run__isnull=False)),
        completed=Count("pk", filter=Q(difference__isnull=False)),
        wins=Count("pk", filter=Q(difference__gt=0)),
        losses=Count("pk", filter=Q(difference__lt=0)),
        ties=Count("pk", filter=Q(difference=0)),
    )
    return pairs
