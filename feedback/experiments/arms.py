"""What an experiment's run gets: what production gets now (the active strategies, never a trial,
which would confound both), and in the treatment arm the change as well."""

from typing import TYPE_CHECKING

from django.db.models import Q

from feedback.models import AppliedStrategy, Experiment, ExperimentPair, Run
from feedback.strategies.conditions import matches

if TYPE_CHECKING:
    from feedback.strategies.injection import Injection


def arm_of(run: Run) -> tuple[Experiment, str] | None:
    """The run's experiment and arm ("control" or "treatment"); None for any other run."""
    if run.purpose != Run.Purpose.EXPERIMENT:
        return None
    pair = ExperimentPair.objects.filter(Q(control_run_id=run.pk) | Q(treatment_run_id=run.pk)).first()
    if pair is None:
        return None
    experiment = Experiment.objects.select_related("strategy_version").get(pk=pair.experiment_id)
    return experiment, "treatment" if pair.treatment_run_id == run.pk else "control"


def add_change(injection: "Injection", run: Run, *, resumed: bool = False) -> None:
    """Add the run's experiment change to ``injection`` (``resumed``: the run's prompt is kept, so
    only what the prompt does not hold: guardrails and the model)."""
    found = arm_of(run)
    if found is None:
        return
    experiment, arm = found
    treated = arm == "treatment"
    if experiment.change_kind == Experiment.Change.STRATEGY:
        version = experiment.strategy_version
        if not resumed and matches(version.condition, task_kind=run.task_kind, text=run.task.text):
            # Recorded in both arms (withheld in control), as a trial records its runs.
            injection.add(version, AppliedStrategy.Arm.TREATMENT if treated else AppliedStrategy.Arm.CONTROL)
        return
    if not treated:
        return
    change = experiment.change
    if experiment.change_kind == Experiment.Change.GUIDANCE and not resumed:
        injection.guidance.append(change["guidance"])
    elif experiment.change_kind == Experiment.Change.GUARDRAILS:
        injection.guardrails.extend(rule for rule in change["guardrails"] if isinstance(rule, dict))
    elif experiment.change_kind == Experiment.Change.MODEL:
        injection.model = change["model"]
