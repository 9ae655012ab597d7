"""Mining's skipped-tool pattern kind: the runs of a task kind that fail when they do without a
tool that the kind's successes call, the commonest way a small model fails a task it could do: it
answers from its own reckoning (an expression left unevaluated, a figure made up) instead of
calling the tool that works it out (issue 25). mine() (mining.py) calls skipped_tools().

For each task kind and tool: the failing and the succeeding runs that called it, from one grouping
scan of the window's tool calls; a tool that nearly every success of the kind called
(CALLED_BY_SUCCESSES) and that most failures never called is the pattern. A run that called the
tool and failed did not skip it: its error is another pattern's (error signatures). Its remedy is
a guardrail the engine enforces whatever the model does: the answer waits for the tool
(guardrails.py, ``answer_precondition``).
"""

from datetime import datetime

from django.conf import settings
from django.db.models import Count, Exists, OuterRef

from feedback.agent.guardrails import ALWAYS_OFFERED
from feedback.models import Run, Step

from .patterns import (
    EVIDENCE_LIMIT,
    Pattern,
    _counted,
    _failing,
    _grouped_steps,
    _keep,
    _pattern,
    _succeeding,
    _window_runs,
)

# A tool the successes of a kind call only now and then is no tool the kind needs.
CALLED_BY_SUCCESSES = 0.8


def _called(tool: str) -> Exists:
    return Exists(Step.objects.filter(run=OuterRef("pk"), kind=Step.Kind.TOOL_CALL, tool_name=tool))


def skipped_tools(since: datetime, totals: dict) -> list[Pattern]:
    rows = (
        _grouped_steps(since)
        .filter(kind=Step.Kind.TOOL_CALL)
        .filter(_counted("run__"))
        .exclude(tool_name__in=[*ALWAYS_OFFERED, ""])
        .values("run__task_kind", "tool_name")
        .annotate(
            failing=Count("run", distinct=True, filter=_failing("run__")),
            succeeding=Count("run", distinct=True, filter=_succeeding("run__")),
        )
    )
    patterns = []
    for row in rows:
        kind, tool = row["run__task_kind"], row["tool_name"]
        failing_total, succeeding_total = totals.get(kind, (0, 0))
        if (
            succeeding_total < settings.STRATEGY_MIN_SUPPORT
            or row["succeeding"] < CALLED_BY_SUCCESSES * succeeding_total
        ):
            continue
        # The pattern is the tool's absence: the runs of each side that never called it.
        pattern = _pattern(
            "tool_skipped",
            f"tool_skipped:{kind}:{tool}",
            kind,
            failing_total - row["failing"],
            succeeding_total - row["succeeding"],
            totals,
            {"tool": tool, "called_by_successes": round(row["succeeding"] / succeeding_total, 3)},
        )
        if not _keep(pattern):
            continue
        # The failures that answered without it first: those its guardrail would have held back.
        without = _window_runs(since).filter(_failing(), task_kind=kind).exclude(_called(tool))
        answered = list(
            without.filter(status=Run.Status.SUCCEEDED).order_by("pk").values_list("pk", flat=True)[:EVIDENCE_LIMIT]
        )
        rest = EVIDENCE_LIMIT - len(answered)
        others = without.exclude(status=Run.Status.SUCCEEDED).order_by("pk").values_list("pk", flat=True)[:rest]
        pattern.evidence = sorted(answered + (list(others) if rest > 0 else []))
        patterns.append(pattern)
    return patterns
