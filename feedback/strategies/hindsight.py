"""Would a strategy have fixed its evidence runs? What can be computed from the record, and no more.

For each evidence run, against the strategy's current version:

- **out of scope**: the version's condition does not match the run's task, so the strategy would
  not have been applied to it at all;
- **a guardrail would have acted**: the run's recorded tool calls, replayed in order through the
  version's guardrails (with the files of the task's workspace), reach a first call that one of
  them would have refused or changed (a precondition not met, a parameter rule, a path resolved in
  the workspace, a disabled tool, a longer retry policy), and that call had failed; or the
  run-wide guardrails would have changed what the run was offered (fewer tools) or how its model
  was asked (the reply mode) while its replies failed in the other mode. Replay stops at that
  call: from there the run would have gone differently, and whether it would then have succeeded
  is not known. A first call acted on that had worked is shown too, and is no fix;
- **shows the pattern the guidance addresses**: the run's steps or evaluations match the mined
  pattern (the same error signature, reply failure, call sequence, evaluator feedback or task
  words). That the model would follow the guidance is not known: a trial measures it;
- **neither**; or, for a strategy written by a person, no mined pattern to compare with.
"""

import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

from django.utils.translation import gettext as _

from feedback.agent.guardrails import Guardrails, last_results, states_result
from feedback.models import Evaluation, Run, Step, Strategy

from .conditions import matches
from .replies import reply_failure


@dataclass
class Hindsight:
    run: Run
    verdict: str  # "out_of_scope", "guardrail", "guidance", "neither" or "unchecked"
    actions: list[str] = field(default_factory=list)


def _workspace(run: Run) -> Path:
    # The files the run started from; its own sandbox may hold what it wrote, or be gone.
    workspace = run.task.workspace
    return workspace.path if workspace is not None else Path("/nonexistent-workspace")


def _run_mode(steps: list[Step]) -> str:
    """How the run's model was asked, as far as its steps show (see replies.REPLY_MODE)."""
    for step in steps:
        if step.error_class == "MalformedReply" or step.tool_call_id.startswith("json-"):
            return "json"
    return "native"


def _run_wide(run: Run, steps: list[Step], guardrails: Guardrails) -> list[str]:
    actions = []
    offered = {t for t in run.tools_offered or [] if isinstance(t, str)}
    allowed = guardrails.allowed_tools(offered) if offered else None
    if allowed is not None and offered - allowed:
        actions.append(
            _("It would have been offered %(kept)s of its %(offered)s tools: %(tools)s.")
            % {"kept": len(allowed & offered), "offered": len(offered), "tools": ", ".join(sorted(allowed & offered))}
        )
    failed_replies = any(
        reply_failure(error_class=s.error_class, error=s.error, tool_call_id=s.tool_call_id)
        for s in steps
        if not s.success
    )
    succeeded = {s.tool_name for s in steps if s.kind == Step.Kind.TOOL_CALL and s.success}
    answer, results = run.final_output or "", last_results(steps)
    if run.status == Run.Status.SUCCEEDED and (
        refusal := guardrails.answer_refusal(succeeded, answer=answer, results=results)
    ):
        actions.append(_("Its answer would have been held back: %(refusal)s") % {"refusal": refusal})
    mode = _run_mode(steps)
    # "auto" is native tool calls first (guardrails.tool_mode).
    target = {"auto": "native"}.get(guardrails.tool_mode(mode), guardrails.tool_mode(mode))
    if failed_replies and target != mode:
        if target == "json":
            actions.append(_("Its model would have been asked for JSON replies instead of native tool calls."))
        else:
            actions.append(_("Its model would have been asked for native tool calls instead of JSON replies."))
    return actions


def _first_step_acted_on(steps: list[Step], guardrails: Guardrails) -> tuple[str, bool]:
    """What the guardrails would have done to the first tool call they act on, and whether that
    call had failed (acting on a call that worked is no fix: the page says so)."""
    succeeded: set[str] = set()
    for step in steps:
        if step.kind != Step.Kind.TOOL_CALL:
            continue
        where = {"index": step.index, "tool": step.tool_name}
        arguments = step.arguments if isinstance(step.arguments, str) else json.dumps(step.arguments or {})
        decision = guardrails.check(step.tool_name, arguments, succeeded)
        failed = step.success is False
        if decision.refusal:
            if failed:
                text = _("Step %(index)s (%(tool)s), which failed, would have been refused: %(refusal)s")
            else:
                text = _("Step %(index)s (%(tool)s), which had worked, would have been refused: %(refusal)s")
            return text % {**where, "refusal": decision.refusal}, failed
        if decision.notes:
            if failed:
                text = _("Step %(index)s (%(tool)s), which failed, would have run with other arguments: %(notes)s")
            else:
                text = _("Step %(index)s (%(tool)s), which had worked, would have run with other arguments: %(notes)s")
            return text % {**where, "notes": " ".join(decision.notes)}, failed
        for rule in guardrails.rules:
            more = int(rule.get("max_attempts", 0)) if rule["type"] == "retry_policy" else 0
            if rule.get("tool") == step.tool_name and step.error_class == "ToolTimeout" and more > step.attempts:
                text = _(
                    "Step %(index)s (%(tool)s), which timed out, would have had %(attempts)s attempts, not %(had)s."
                )
                return text % {**where, "attempts": more, "had": step.attempts}, True
        if step.success:
            succeeded.add(step.tool_name)
    return "", False


def _called(steps: list[Step], tool: str) -> bool:
    return any(s.kind == Step.Kind.TOOL_CALL and s.tool_name == tool and s.success for s in steps)


def _bigram(steps: list[Step], first: str, then: str) -> bool:
    calls = [s.tool_name for s in steps if s.kind == Step.Kind.TOOL_CALL and s.tool_name != "update_plan"]
    return any(a == first and b == then for a, b in pairwise(calls))


def _shows_pattern(strategy: Strategy, runs: list[Run], steps: dict[int, list[Step]]) -> dict[int, bool] | None:
    """Which runs show the strategy's mined pattern; None when it has none (written by a person)."""
    kind, key, summary = strategy.pattern_kind, strategy.pattern_key, strategy.evidence_summary or {}
    parts = key.split(":", 2)
    if len(parts) < 3:
        return None
    rest = parts[2]
    if kind == "error_signature":
        return {r.pk: any(s.error_signature == rest for s in steps[r.pk]) for r in runs}
    if kind == "malformed_reply":
        failure, _, mode = rest.partition(":")
        return {
            r.pk: any(
                reply_failure(error_class=s.error_class, error=s.error, tool_call_id=s.tool_call_id) == (failure, mode)
                for s in steps[r.pk]
            )
            for r in runs
        }
    if kind == "tool_skipped":
        return {r.pk: not _called(steps[r.pk], rest) for r in runs}
    if kind == "tool_result_unused":
        results = {r.pk: last_results(steps[r.pk]).get(rest) for r in runs}
        return {r.pk: bool(results[r.pk]) and not states_result(r.final_output or "", results[r.pk]) for r in runs}
    if kind == "tool_sequence":
        first, _, then = rest.partition(">")
        return {r.pk: _bigram(steps[r.pk], first, then) for r in runs}
    if kind == "evaluator_feedback" and summary.get("evaluator") and summary.get("feedback"):
        showing = set(
            Evaluation.objects.filter(
                run_id__in=[r.pk for r in runs],
                evaluator=summary["evaluator"],
                feedback__startswith=summary["feedback"],
            ).values_list("run_id", flat=True)
        )
        return {r.pk: r.pk in showing for r in runs}
    if kind == "task_keywords":
        words = rest.split("+")
        return {r.pk: any(re.search(rf"\b{re.escape(w)}\b", r.task.text, re.I) for w in words) for r in runs}
    return None


def evidence_hindsight(strategy: Strategy, runs: list[Run]) -> list[Hindsight]:
    """What the current version would have done to each of ``runs`` (with their tasks loaded):
    two queries for steps and evaluations, whatever the number of runs."""
    version = strategy.current_version
    if version is None or not runs:
        return [Hindsight(run, "unchecked") for run in runs]
    steps: dict[int, list[Step]] = defaultdict(list)
    for step in (
        Step.objects.filter(run_id__in=[r.pk for r in runs], kind__in=[Step.Kind.TOOL_CALL, Step.Kind.MODEL_ERROR])
        .only("run_id", "index", "kind", "tool_name", "tool_call_id", "arguments", "result", "success", "error",
              "error_class", "error_signature", "attempts")
        .order_by("run_id", "index")
    ):  # fmt: skip
        steps[step.run_id].append(step)
    shows = _shows_pattern(strategy, runs, steps)
    out = []
    for run in runs:
        if not matches(version.condition or {}, task_kind=run.task_kind, text=run.task.text):
            out.append(Hindsight(run, "out_of_scope"))
            continue
        guardrails = Guardrails(version.guardrails or [], _workspace(run))
        run_wide, first, on_failure = [], "", False
        if guardrails:
            run_wide = _run_wide(run, steps[run.pk], guardrails)
            first, on_failure = _first_step_acted_on(steps[run.pk], guardrails)
        actions = run_wide + ([first] if first else [])
        if on_failure or run_wide:
            out.append(Hindsight(run, "guardrail", actions))
        elif shows is None:
            out.append(Hindsight(run, "unchecked", actions))
        else:
            out.append(Hindsight(run, "guidance" if shows[run.pk] else "neither", actions))
    return out


def tally(hindsight: list[Hindsight]) -> dict[str, int]:
    counts = {"guardrail": 0, "guidance": 0, "out_of_scope": 0, "neither": 0, "unchecked": 0}
    for h in hindsight:
        counts[h.verdict] += 1
    return counts
