"""The outcome's precision on datasets: of the runs the outcome calls *accomplished*, the share a
dataset item's checker passes (issue 23).

Production runs have no checker, so what a reviewer trusts there is the outcome decided from the
other evidence (a reference, a configured LLM judge; a heuristic "yes" is unknown). Dataset runs
have both: the outcome is decided as production would decide it, without the checker
(``run_outcome(use_checker=False)``), and checked against it. This figure is about runs with a
dataset item (experiment runs), never production runs, and the page says so. The checkers are
``feedback.datasets.checkers``.

Computed over at most PRECISION_SAMPLE of the window's latest experiment runs: each needs its
checker's verdict, which is Python, not SQL.
"""

from collections.abc import Iterable

from feedback.models import Run

from .window import Window

PRECISION_SAMPLE = 500


def precision(pairs: Iterable[tuple[str, bool | None]]) -> dict:
    """From (outcome without the checker, the checker's verdict or None) pairs: of the runs
    called accomplished that have a verdict, the share the checker passes, with its n."""
    called = [passed for outcome, passed in pairs if outcome == Run.Outcome.ACCOMPLISHED and passed is not None]
    return {"n": len(called), "passed": sum(called), "precision": sum(called) / len(called) if called else None}


def outcome_precision(window: Window) -> dict:
    """The outcome's precision on the window's dataset runs."""
    from feedback.datasets.checkers import checker_verdict
    from feedback.evaluation.chain import run_outcome, verdict_rows

    runs = Run.objects.filter(
        purpose=Run.Purpose.EXPERIMENT, created_at__gte=window.since, created_at__lt=window.until
    ).select_related("task", "dataset_item")
    if window.kind:
        runs = runs.filter(task_kind=window.kind)
    sample = list(runs.order_by("-created_at")[:PRECISION_SAMPLE])
    # Every run's evaluations in one query, not one per run: the metrics page reads this.
    rows = verdict_rows([run.pk for run in sample])
    pairs = []
    for run in sample:
        verdict = checker_verdict(run)
        # A run without a verdict counts nowhere (precision() drops it): its outcome, which may
        # cost a query of its steps, is not worth deciding.
        if verdict is not None:
            pairs.append((run_outcome(run, rows.get(run.pk, []), use_checker=False), bool(verdict.passed)))
    return precision(pairs)
