"""The state changes people trigger. Keyword-only, typed, one transaction each; work for the
worker is queued only once the transaction has committed."""

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from feedback.models import Evaluation, Run, Task, ToolConfirmation, Workspace
from feedback.rollups import daily_stats_refresh_run


class AlreadyDecided(Exception):
    """Someone else decided first; the caller shows the current state instead."""


@transaction.atomic
def task_submit(
    *,
    user: AbstractBaseUser,
    text: str,
    kind: str,
    expected_answer: str = "",
    workspace: Workspace | None = None,
) -> Run:
    from feedback.tasks import run_execute_task

    task = Task.objects.create(
        text=text, kind=kind, expected_answer=expected_answer, workspace=workspace, created_by=user
    )
    run = Run.objects.create(task=task, task_kind=task.kind)
    run_execute_task.delay_on_commit(run.pk)
    return run


@transaction.atomic
def run_cancel(*, run: Run, user: AbstractBaseUser) -> bool:
    """Stop a run. A queued or waiting run stops at once; a running one at its next step."""
    if not run_can_control(run=run, user=user):
        raise PermissionDenied
    stopped = Run.objects.filter(pk=run.pk, status__in=[Run.Status.QUEUED, Run.Status.AWAITING_CONFIRMATION]).update(
        status=Run.Status.CANCELLED,
        cancel_requested=True,
        finished_at=timezone.now(),
        error="Cancelled by a user.",
    )
    if stopped:
        from feedback.tasks import daily_stats_refresh_task

        daily_stats_refresh_task.delay_on_commit(run.pk)
    else:
        stopped = Run.objects.filter(pk=run.pk, status__in=Run.ACTIVE_STATUSES).update(cancel_requested=True)
    return bool(stopped)


@transaction.atomic
def run_rerun(*, run: Run, user: AbstractBaseUser) -> Run:
    """A fresh run of the same task (a new task row keeps who asked and when)."""
    task = run.task
    new_run = task_submit(
        user=user,
        text=task.text,
        kind=task.kind,
        expected_answer=task.expected_answer,
        workspace=task.workspace,
    )
    Run.objects.filter(pk=new_run.pk).update(retry_of=run)
    new_run.retry_of = run
    from feedback.tasks import daily_stats_refresh_task

    # The original now counts as an intervention on its own day.
    daily_stats_refresh_task.delay_on_commit(run.pk)
    return new_run


def run_can_control(*, run: Run, user: AbstractBaseUser) -> bool:
    return user.has_perm("feedback.score_run") or (
        user.has_perm("feedback.add_task") and run.task.created_by_id == user.pk
    )


@transaction.atomic
def confirmation_decide(
    *, confirmation: ToolConfirmation, user: AbstractBaseUser, approve: bool, reason: str = ""
) -> ToolConfirmation:
    """Approve or refuse a sensitive tool call. When the run has nothing else waiting it goes
    back to the queue: approval runs the call, refusal becomes the model's observation."""
    if not user.has_perm("feedback.confirm_toolconfirmation"):
        raise PermissionDenied
    decided = ToolConfirmation.objects.filter(pk=confirmation.pk, status=ToolConfirmation.Status.PENDING).update(
        status=ToolConfirmation.Status.APPROVED if approve else ToolConfirmation.Status.REJECTED,
        decided_by=user,
        decided_at=timezone.now(),
        reason=reason,
    )
    if not decided:
        raise AlreadyDecided
    run_id = confirmation.run_id
    if not ToolConfirmation.objects.filter(run_id=run_id, status=ToolConfirmation.Status.PENDING).exists():
        resumed = Run.objects.filter(pk=run_id, status=Run.Status.AWAITING_CONFIRMATION).update(
            status=Run.Status.QUEUED
        )
        if resumed:
            from feedback.tasks import run_execute_task

            run_execute_task.delay_on_commit(run_id)
    confirmation.refresh_from_db()
    return confirmation


# --- evaluation -----------------------------------------------------------------------------
@transaction.atomic
def run_add_human_score(
    *, run: Run, user: AbstractBaseUser, score: float, comment: str = "", corrected_answer: str = ""
) -> Evaluation:
    """A reviewer's score. It outranks the automatic ones (see feedback/evaluation/chain.py) and
    counts as a human intervention on the run."""
    from feedback.evaluation.chain import composite_score

    if not user.has_perm("feedback.score_run"):
        raise PermissionDenied
    if not 0 <= score <= 1:
        raise ValueError("A score is between 0 and 1.")
    run = Run.objects.select_for_update().get(pk=run.pk)
    # Filed under the latest round so the page shows it beside the scores it overrides.
    latest = run.evaluations.aggregate(r=Max("round"))["r"] or 1
    evaluation = Evaluation.objects.create(
        run=run,
        round=latest,
        evaluator="human",
        kind=Evaluation.Kind.HUMAN,
        score=score,
        feedback=comment,
        corrected_answer=corrected_answer,
        author=user,
    )
    run.score = composite_score(run)
    run.save(update_fields=["score"])
    # Here, not in a task: one day's recount is cheap, and the reviewer's next page shows it.
    daily_stats_refresh_run(run_id=run.pk)
    return evaluation


@transaction.atomic
def run_reevaluate(*, run: Run, user: AbstractBaseUser) -> int:
    """Queue a new round of automatic evaluation; earlier rounds stay as history. Returns the
    round number the worker will write."""
    from feedback.tasks import run_evaluate_task

    if not user.has_perm("feedback.score_run"):
        raise PermissionDenied
    if run.is_active:
        raise ValueError("A run is evaluated once it has ended.")
    run = Run.objects.select_for_update().get(pk=run.pk)
    next_round = (run.evaluations.aggregate(r=Max("round"))["r"] or 0) + 1
    run_evaluate_task.delay_on_commit(run.pk, expected_round=next_round)
    return next_round
