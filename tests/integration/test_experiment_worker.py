"""A paired experiment through the real broker and a real worker process: its runs wait while
a person's run waits, then its pairs run, are evaluated, paired and decided by the worker."""

import time

import pytest
from django.urls import reverse

from feedback.models import Experiment, Run

from ..conftest import make_user
from ..test_experiments import RESOLVE, _dataset, _nested_files
from .worker import WorkerProcess, wait_for_run

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def wait_for_experiment(experiment_id: int, timeout: float = 180) -> Experiment:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        experiment = Experiment.objects.get(pk=experiment_id)
        if not experiment.running:
            return experiment
        time.sleep(0.3)
    raise AssertionError(f"Experiment {experiment_id} still running after {timeout} s")


def test_an_experiment_yields_to_production_and_is_decided_by_the_worker(client, shared_folders):
    reviewer = make_user("exp-rev", "reviewer")
    staff = make_user("exp-staff", "staff")
    version = _dataset(reviewer, _nested_files(12))
    client.force_login(reviewer)
    client.post(
        reverse("feedback-experiment-start"),
        {"dataset_version": version.pk, "repeats": 1, "change_kind": "guardrails", "guardrails": _json(RESOLVE)},
    )
    experiment = Experiment.objects.get()
    queued_first = list(Run.objects.filter(purpose=Run.Purpose.EXPERIMENT).values_list("pk", flat=True))
    assert len(queued_first) == 4  # two pairs in flight
    # A person's task, queued after the experiment's runs.
    client.force_login(staff)
    client.post(reverse("feedback-task-submit"), {"kind": "arithmetic", "text": "What is 12 * 12?"})
    production = Run.objects.get(purpose=Run.Purpose.PRODUCTION)

    worker = WorkerProcess(shared_folders, "exp", concurrency=1).start()  # one slot: the order shows
    try:
        production = wait_for_run(production.pk)
        done = wait_for_experiment(experiment.pk)
    finally:
        worker.stop()
    assert production.status == Run.Status.SUCCEEDED, worker.log()
    first_experiment_start = min(Run.objects.filter(pk__in=queued_first).values_list("started_at", flat=True))
    assert production.started_at < first_experiment_start, worker.log()
    assert done.decision == Experiment.Decision.PROMOTE, worker.log()
    assert done.verdict["wins"] >= 7 and done.verdict["losses"] == 0
    assert done.verdict["arms"]["treatment"]["passed"] >= 7
    # Every experiment run was evaluated by the worker's chain like any other run.
    ended = Run.objects.filter(purpose=Run.Purpose.EXPERIMENT, status=Run.Status.SUCCEEDED)
    assert ended.exists() and not ended.filter(evaluations__isnull=True).exists()


def _json(value) -> str:
    import json

    return json.dumps(value)
