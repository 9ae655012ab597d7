"""Mining's two pattern kinds of a tool's help not taken, the commonest ways a small model fails a
task it could do (issue 25): it answers from its own reckoning (a figure made up) instead of
calling the tool that works it out, or calls it and then answers without its result (the
expression it gave the calculator, unevaluated). mine() (mining.py) calls skipped_tools() and
unused_results().

**Skipped** (``tool_skipped``): for each task kind and tool, the failing and the succeeding runs
that called it, from one grouping scan of the window's tool calls; a tool that nearly every success of the kind called
(CALLED_BY_SUCCESSES) and that most failures never called is the pattern. A run that called the
tool and failed did not skip it: its error is another pattern's (error signatures).

**Result unused** (``tool_result_unused``): among the newest SAMPLE answered runs of a kind (their
answers and tool results are compared in Python), the runs that called a tool successfully and
answered without stating what it returned (guardrails.states_result), where the successes that
called it state it (at least CALLED_BY_SUCCESSES of them).

The remedy of both is a guardrail the engine enforces whatever the model does: the answer waits
for the tool, and for the second one for its result too (guardrails.py, ``answer_precondition``);
and, where the successes of the kind used fewer tools than the failures were offered, only those
(``tool_subset``, from replies.offer_facts): on arithmetic the local model, offered the calculator
beside analyze_text and http_get, gave the calculator "(36 + 20) * 9" without its brackets and
answered with that, and offered the calculator alone it worked the sum out right.
"""

from datetime import datetime

from django.conf import settings
from django.db.models import Count, Exists, OuterRef

from feedback.agent.guardrails import ALWAYS_OFFERED, result_values, states_result
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
from .replies import offer_facts, tools_used

# A tool the successes of a kind call only now and then is no tool the kind needs.
CALLED_BY_SUCCESSES = 0.8
SAMPLE = 1000  # the newest answered runs of each side a kind's answers are read from


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
    patterns, used = [], {}  # used: the tools each kind's successes used, asked once a kind
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
        if kind not in used:
            used[kind] = tools_used(since, kind)
        pattern.details.update(offer_facts(used[kind], pattern.evidence))
        patterns.append(pattern)
    return patterns


def _last_results(run_ids: list[int]) -> dict[tuple[int, str], list]:
    """(run, tool) -> what the tool's last successful call in the run returned (result_values)."""
    last = {}
    calls = (
        Step.objects.filter(run_id__in=run_ids, kind=Step.Kind.TOOL_CALL, success=True)
        .exclude(tool_name__in=[*ALWAYS_OFFERED, ""])
        .order_by("run_id", "index")
        .values_list("run_id", "tool_name", "arguments", "result")
    )
    for run_id, tool, arguments, result in calls.iterator(chunk_size=2000):
        last[(run_id, tool)] = result_values(result, arguments)
    return last


def _unused(answers: dict[int, str], last: dict[tuple[int, str], list], tool: str) -> list[int]:
    """The runs of ``answers`` that called ``tool`` and answered without stating its result."""
    return [r for r, answer in answers.items() if last.get((r, tool)) and not states_result(answer, last[r, tool])]


def unused_results(since: datetime, totals: dict) -> list[Pattern]:
    patterns = []
    for kind in sorted(totals):
        answered = _window_runs(since).filter(task_kind=kind, status=Run.Status.SUCCEEDED)
        failing = dict(answered.filter(_failing()).order_by("-pk").values_list("pk", "final_output")[:SAMPLE])
        succeeding = dict(answered.filter(_succeeding()).order_by("-pk").values_list("pk", "final_output")[:SAMPLE])
        if len(failing) < settings.STRATEGY_MIN_SUPPORT or not succeeding:
            continue
        last = _last_results([*failing, *succeeding])
        sample = {kind: (len(failing), len(succeeding))}
        used = None  # the tools the kind's successes used: asked once, for its first pattern
        for tool in sorted({tool for _, tool in last}):
            called = [r for r in succeeding if last.get((r, tool))]
            failing_unused, succeeding_unused = _unused(failing, last, tool), _unused(succeeding, last, tool)
            # The successes that called it answer with its result: that is what the tool is for.
            if not called or len(called) - len(succeeding_unused) < CALLED_BY_SUCCESSES * len(called):
                continue
            pattern = _pattern(
                "tool_result_unused",
                f"tool_result_unused:{kind}:{tool}",
                kind,
                len(failing_unused),
                len(succeeding_unused),
                sample,
                {"tool": tool, "stated_by_successes": round(1 - len(succeeding_unused) / len(called), 3)},
            )
            if _keep(pattern):
                pattern.evidence = sorted(failing_unused)[-EVIDENCE_LIMIT:]
                used = tools_used(since, kind) if used is None else used
                pattern.details.update(offer_facts(used, pattern.evidence))
                patterns.append(pattern)
    return patterns
