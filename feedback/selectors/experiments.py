"""The reads behind the experiment pages."""

from django.db.models import Count, Q, QuerySet

from feedback.experiments.figures import arm_figures, experiment_progress
from feedback.experiments.paired import PairedVerdict, paired_verdict
from feedback.models import Experiment, ExperimentPair


def experiment_list() -> QuerySet[Experiment]:
    return Experiment.objects.select_related("dataset_version__dataset", "strategy", "created_by").annotate(
        pair_count=Count("pairs"),
        completed=Count("pairs", filter=Q(pairs__difference__isnull=False)),
        wins=Count("pairs", filter=Q(pairs__difference__gt=0)),
        losses=Count("pairs", filter=Q(pairs__difference__lt=0)),
    )


def experiment_pairs(experiment: Experiment) -> QuerySet[ExperimentPair]:
    """Its pairs in the order they start (so the started ones come first), with both runs."""
    return (
        experiment.pairs.select_related("item", "control_run", "treatment_run")
        .order_by("position")
        .only(
            "position", "repeat", "difference", "control_pass", "treatment_pass", "completed_at",
            "item__position", "item__text", "item__split",
            "control_run__status", "control_run__score", "control_run__tokens_in", "control_run__tokens_out",
            "treatment_run__status", "treatment_run__score", "treatment_run__tokens_in", "treatment_run__tokens_out",
        )
    )  # fmt: skip


def experiment_figures(experiment: Experiment) -> dict:
    """The verdict and the arms' figures: frozen ones once it ended, live ones while it runs."""
    progress = experiment_progress(experiment)
    if not experiment.running and experiment.verdict:
        return {"progress": progress, "verdict": experiment.verdict, "arms": experiment.verdict.get("arms", {})}
    differences = experiment.pairs.filter(difference__isnull=False).values_list("difference", flat=True)
    verdict: PairedVerdict = paired_verdict(differences)
    return {"progress": progress, "verdict": verdict.as_json(), "arms": arm_figures(experiment)}
