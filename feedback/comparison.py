"""Two runs side by side: their figures, their evaluations by evaluator, and their steps aligned.

Steps are aligned on what each did (its kind and, for a tool call, the tool), the way a diff
aligns lines: the longest run of matching steps lines up, and what one run did that the other
did not stands alone. So a run with a strategy that skipped a failing call shows the call on one
side and a gap on the other, at the place it happened.
"""

from dataclasses import dataclass
from difflib import SequenceMatcher

from django.db.models import QuerySet

from feedback.models import AppliedStrategy, Evaluation, Run, Step

# Enough to compare two ordinary runs whole; longer ones are compared over their first steps.
MAX_STEPS = 500
# The other runs a comparison offers: of the same task text, newest first.
SUGGESTIONS = 10


@dataclass(frozen=True)
class StepPair:
    left: Step | None
    right: Step | None

    @property
    def same(self) -> bool:
        """Both did the same thing with the same result."""
        if self.left is None or self.right is None:
            return False
        keys = ("kind", "tool_name", "thought", "arguments", "result", "error", "success")
        return all(getattr(self.left, k) == getattr(self.right, k) for k in keys)


@dataclass(frozen=True)
class EvaluationPair:
    evaluator: str
    left: Evaluation | None
    right: Evaluation | None


def _action(step: Step) -> tuple[str, str]:
    return step.kind, step.tool_name


def align_steps(left: list[Step], right: list[Step]) -> list[StepPair]:
    """The steps of two runs in one list of pairs, matching steps side by side."""
    matcher = SequenceMatcher(a=[_action(s) for s in left], b=[_action(s) for s in right], autojunk=False)
    pairs: list[StepPair] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            pairs += [StepPair(left[i1 + k], right[j1 + k]) for k in range(i2 - i1)]
        else:
            # A replaced stretch: side by side as far as both go, then the longer one alone.
            width = max(i2 - i1, j2 - j1)
            pairs += [
                StepPair(left[i1 + k] if i1 + k < i2 else None, right[j1 + k] if j1 + k < j2 else None)
                for k in range(width)
            ]
    return pairs


def comparison_steps(run: Run) -> list[Step]:
    return list(run.steps.order_by("index")[:MAX_STEPS])


def latest_evaluations(run: Run) -> dict[str, Evaluation]:
    """Each evaluator's latest word on the run (a later round replaces an earlier one)."""
    latest: dict[str, Evaluation] = {}
    for evaluation in run.evaluations.select_related("author").order_by("round", "id"):
        latest[evaluation.evaluator] = evaluation
    return latest


def pair_evaluations(left: Run, right: Run) -> list[EvaluationPair]:
    a, b = latest_evaluations(left), latest_evaluations(right)
    return [EvaluationPair(name, a.get(name), b.get(name)) for name in sorted({*a, *b})]


def applied(run: Run) -> list[AppliedStrategy]:
    return list(run.applied_strategies.select_related("strategy_version__strategy").order_by("id"))


def suggestions(run: Run, visible: QuerySet[Run]) -> QuerySet[Run]:
    """Other runs of the same task text the reader may see, newest first: a re-run, or the same
    task in the other arm of a trial."""
    return (
        visible.filter(task__text=run.task.text)
        .exclude(pk=run.pk)
        .select_related("task")
        .prefetch_related("applied_strategies__strategy_version__strategy")
        .order_by("-created_at", "-id")[:SUGGESTIONS]
    )
