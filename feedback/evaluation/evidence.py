"""What counts as evidence that a run accomplished its task (chain.run_outcome's rule).

A heuristic that reads an answer's shape (the offline judge: new words, the task's words, clean
tool calls) cannot tell a right figure from a wrong one: on a real small model it called 10 of 12
arithmetic answers accomplished, 5 of them wrong. Evidence is what knows the answer or reads it:
a person, a reference (the expected answer), a dataset item's checker, or an LLM judge the
operator configured. A run whose tool calls all failed answered from nothing a tool returned.
"""

from django.db.models import Count, Q

from feedback.models import Run, Step
from feedback.models.evaluation import OFFLINE_JUDGE_NAME, Evaluation

# Bookkeeping the model writes for itself, not a tool the task needs.
_NOT_WORK = ("update_plan",)


def every_tool_call_failed(run_id: int) -> bool:
    """Whether the run called tools (other than its plan) and not one of those calls succeeded."""
    counts = (
        Step.objects.filter(run_id=run_id, kind=Step.Kind.TOOL_CALL)
        .exclude(tool_name__in=_NOT_WORK)
        .aggregate(calls=Count("pk"), ok=Count("pk", filter=Q(success=True)))
    )
    return counts["calls"] > 0 and counts["ok"] == 0


def checker_passed(run: Run) -> bool | None:
    """The dataset checker's verdict on the run's answer (None: no dataset item, or no answer)."""
    from feedback.datasets.checkers import checker_verdict  # late: the checkers read the models

    result = checker_verdict(run)
    return None if result is None else bool(result.passed)


def is_evidence(row: dict) -> bool:
    """Whether an automatic evaluation's "accomplished" counts as evidence: the offline
    heuristic judge's does not (its score stays a hint)."""
    return not (row["kind"] == Evaluation.Kind.JUDGE and row.get("evaluator") == OFFLINE_JUDGE_NAME)


def heuristic_hint(run: Run, evaluations: list[Evaluation]) -> bool:
    """Whether the run page shows the heuristic judge's "yes" as a hint: the outcome is unknown
    and the latest automatic round's heuristic judge said accomplished."""
    if run.outcome != Run.Outcome.UNKNOWN:
        return False
    automatic = [e for e in evaluations if e.kind != Evaluation.Kind.HUMAN]
    latest = max((e.round for e in automatic), default=None)
    return any(
        e.round == latest and e.evaluator == OFFLINE_JUDGE_NAME and e.accomplished and e.status == Evaluation.Status.OK
        for e in automatic
    )
