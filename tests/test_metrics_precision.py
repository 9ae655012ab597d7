"""The outcome's precision on dataset runs (metrics/precision.py): only the runs the checker gives a
verdict on have their outcome decided, and the figure is the one the plain definition gives."""

from unittest import mock

import pytest

from feedback import metrics
from feedback.datasets.checkers import checker_verdict
from feedback.evaluation import chain
from feedback.evaluation.chain import evaluate_run, run_outcome, verdict_rows
from feedback.metrics.precision import precision
from feedback.models import Run

from .factories import make_finished_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def dataset_runs(operator) -> list[Run]:
    from feedback.datasets.services import dataset_from_runs

    source = make_finished_run(output="It is 42.", text="What is 6 * 7?", user=operator)
    item = dataset_from_runs(runs=[source], user=operator, checker="numeric", name="sums").items.get()
    runs = []
    # Right, wrong by the checker, and one that ended without an answer (no verdict).
    for answer, status in (
        ("6 * 7 = 42", Run.Status.SUCCEEDED),
        ("42, or rather 41", Run.Status.SUCCEEDED),
        ("", Run.Status.FAILED),
    ):
        run = make_finished_run(
            output=answer,
            expected_answer="42",
            text="What is 6 * 7?",
            user=operator,
            status=status,
            purpose=Run.Purpose.EXPERIMENT,
            dataset_item=item,
        )
        evaluate_run(run.pk)
        runs.append(run)
    return runs


def _every_run_decided(runs: list[Run]) -> dict:
    """The figure as first written: every sampled run's outcome decided, then the pairs filtered."""
    rows = verdict_rows([run.pk for run in runs])
    pairs = []
    for run in Run.objects.filter(pk__in=[run.pk for run in runs]).select_related("task", "dataset_item"):
        verdict = checker_verdict(run)
        outcome = run_outcome(run, rows.get(run.pk, []), use_checker=False)
        pairs.append((outcome, None if verdict is None else bool(verdict.passed)))
    return precision(pairs)


def test_the_figure_is_the_one_of_every_run_decided(dataset_runs):
    figure = metrics.outcome_precision(metrics.Window.last(30))
    assert figure == _every_run_decided(dataset_runs)
    assert figure["n"] == 2


def test_a_run_without_a_verdict_has_no_outcome_decided(dataset_runs):
    with mock.patch.object(chain, "run_outcome", wraps=chain.run_outcome) as decided:
        metrics.outcome_precision(metrics.Window.last(30))
    assert sorted(call.args[0].pk for call in decided.call_args_list) == sorted(run.pk for run in dataset_runs[:2])
