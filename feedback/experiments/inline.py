"""Drive an experiment to its end in this process: what the demo loop does (it runs everything
itself, with no worker), and what `manage.py experiment_run` offers an operator without one.
The same steps as the workers': execute each queued run of the experiment, evaluate it, advance.
A worker that also takes a run finds it claimed (and the other way round): nothing runs twice."""

import time
from collections.abc import Callable

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from feedback.agent.loop import execute_run
from feedback.evaluation.chain import evaluate_run
from feedback.models import Experiment, Run, ToolConfirmation

from .services import experiment_advance, experiment_pair_ids

UNATTENDED = "Refused unattended: no person is there to confirm a sensitive call, so it does not run."


def execute_unattended(run_id: int, *, refuse_as: AbstractBaseUser | None) -> None:
    """Execute the run here. A run that stops for a person's confirmation of a sensitive call waits
    for one, unless ``refuse_as`` is given: then that person (a reviewer account the caller acts
    as, recorded as the decider) refuses every call it waits for and the run goes on without them,
    as it would after a reviewer's refusal in the inbox."""
    from feedback.services import confirmation_decide

    execute_run(run_id)
    while refuse_as is not None and Run.objects.filter(pk=run_id, status=Run.Status.AWAITING_CONFIRMATION).exists():
        for waiting in ToolConfirmation.objects.filter(run_id=run_id, status=ToolConfirmation.Status.PENDING):
            with transaction.atomic():
                confirmation_decide(confirmation=waiting, user=refuse_as, approve=False, reason=UNATTENDED)
        execute_run(run_id)


def experiment_run_here(
    experiment_id: int,
    *,
    timeout: float = 3600,
    out: Callable[[str], None] | None = None,
    each_run: Callable[[int], None] | None = None,
    refuse_as: AbstractBaseUser | None = None,
) -> Experiment:
    """Run the experiment's pairs here until it ends (or ``timeout`` seconds pass; it then goes
    on in the workers, if any). ``each_run(run_id)`` after each run executed and evaluated here
    (a progress line per run: on a real model a run takes the better part of a minute);
    ``refuse_as``: who refuses the sensitive calls its runs wait for (``execute_unattended``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        experiment = experiment_advance(experiment_id=experiment_id)
        if not experiment.running:
            return experiment
        runs = Run.objects.filter(experiment_pair_ids(experiment))
        queued = list(runs.filter(status=Run.Status.QUEUED).order_by("pk").values_list("pk", flat=True))
        for run_id in queued:
            execute_unattended(run_id, refuse_as=refuse_as)
            if each_run is not None:
                evaluate_run(run_id)  # idempotent: the sweep below finds it scored
                each_run(run_id)
        # Evaluate what ended (here or in a worker) and has no score yet: idempotent.
        unscored = list(runs.filter(finished_at__isnull=False, evaluations__isnull=True).values_list("pk", flat=True))
        for run_id in unscored:
            evaluate_run(run_id)
        if out is not None and (queued or unscored):
            done = experiment.pairs.filter(difference__isnull=False).count()
            out(f"  experiment #{experiment_id}: {done} of {experiment.pairs.count()} pairs measured")
        if not queued and not unscored:
            time.sleep(0.5)  # runs under way elsewhere (a worker): wait for them
    return Experiment.objects.get(pk=experiment_id)
