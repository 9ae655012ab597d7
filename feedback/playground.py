"""The playground (issue 26.4): re-run one run with an edited system prompt or guidance, marked
``purpose=playground`` (never in the metrics, mining, trials or the review queue), and show it
beside the original with the run comparison.

What the re-run gets: what production runs get now (the active strategies; no trial, which the
re-run would only confound), plus the edit. An edited guidance is added as one more lesson; a
strategy's edited guidance replaces that strategy's (its guardrails apply as they are); an edited
system prompt replaces the whole prompt the run would otherwise be built with.
"""

from typing import TYPE_CHECKING

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils.translation import gettext as _

from feedback import queue, quota
from feedback.models import AppliedStrategy, PlaygroundRun, Run, Strategy, Task
from feedback.selectors import runs_visible_to
from feedback.storable import unstorable

if TYPE_CHECKING:
    from feedback.strategies.injection import Injection

MAX_PROMPT = 20_000


def playground_rerun(
    *,
    original: Run,
    user: AbstractBaseUser,
    system_prompt: str = "",
    guidance: str = "",
    strategy: Strategy | None = None,
    note: str = "",
) -> PlaygroundRun:
    """Queue a re-run of ``original`` with the edit (module docstring). Refused (PermissionDenied)
    to those who may not see the run or use the playground; an empty edit, a prompt too long, or
    text the database cannot store is a ValidationError, with nothing saved."""
    if not user.has_perm("feedback.add_playgroundrun") or not runs_visible_to(user).filter(pk=original.pk).exists():
        raise PermissionDenied
    system_prompt, guidance = system_prompt.strip(), guidance.strip()
    problems = []
    if not system_prompt and not guidance and strategy is None:
        problems.append(_("Edit the system prompt or write guidance: without an edit it is a plain re-run."))
    if len(system_prompt) > MAX_PROMPT or len(guidance) > MAX_PROMPT:
        problems.append(_("At most %(n)s characters.") % {"n": MAX_PROMPT})
    problems += unstorable(system_prompt, name="system prompt") + unstorable(guidance, name="guidance")
    if strategy is not None and strategy.current_version is None:
        problems.append(_("That strategy has no version to edit."))
    if problems:
        raise ValidationError(problems)
    task = original.task
    with transaction.atomic():
        quota.check_submission(user=user, workspace=task.workspace, files=(), lock=True)
        copy = Task.objects.create(
            text=task.text, kind=task.kind, expected_answer=task.expected_answer, workspace=task.workspace,
            created_by=user,
        )  # fmt: skip
        reserved = (task.workspace.size_bytes or 0) if task.workspace_id else 0
        run = Run.objects.create(
            task=copy, task_kind=copy.kind, purpose=Run.Purpose.PLAYGROUND, dataset_item=original.dataset_item,
            sandbox_bytes=reserved,
        )  # fmt: skip
        playground = PlaygroundRun.objects.create(
            run=run, original=original, system_prompt=system_prompt, guidance=guidance,
            strategy_version=strategy.current_version if strategy else None, note=note[:200], created_by=user,
        )  # fmt: skip
        queue.run_execute(run.pk)
    return playground


def add_edit(injection: "Injection", run: Run) -> None:
    """Add the playground run's edit to ``injection`` (called when the run starts)."""
    from feedback.strategies.injection import insights_in_order  # late: injection imports this module

    edit = PlaygroundRun.objects.select_related("strategy_version").filter(run=run).first()
    if edit is None:
        return
    version = edit.strategy_version
    if version is not None:
        # The strategy as edited: its guardrails and example, the edited guidance instead of its own.
        injection.applied = [(v, arm) for v, arm in injection.applied if v.strategy_id != version.strategy_id]
        injection.guidance = [g for g in injection.guidance if g != version.new_guidance]
        injection.applied.append((version, AppliedStrategy.Arm.TREATMENT))
        injection.guardrails.extend(g for g in version.guardrails if isinstance(g, dict))
        if version.worked_example:
            injection.examples.append(version.worked_example)
        texts = [item["text"] for item in insights_in_order(version.insights)]
        injection.insights = [i for i in injection.insights if i not in texts] + texts
    if edit.guidance:
        injection.guidance.append(edit.guidance)
    if edit.system_prompt:
        injection.system_prompt = edit.system_prompt


def playground_runs(original: Run) -> list[PlaygroundRun]:
    return list(original.playground_runs.select_related("run", "created_by", "strategy_version__strategy")[:50])
