"""The state changes people trigger. Keyword-only, typed, one transaction each; work for the
worker is queued only once the transaction has committed."""

import json
import logging
import shutil
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.core.files.uploadedfile import UploadedFile
from django.db import transaction
from django.db.models import Max, Q
from django.utils import timezone
from django.utils.translation import gettext as _

from feedback import lifecycle, queue, quota
from feedback.agent.sandbox import SandboxError, resolve
from feedback.cron import check_schedule
from feedback.models import (
    Evaluation,
    InboxClaim,
    Run,
    ScoreConfig,
    ScoreValue,
    Task,
    ToolConfirmation,
    Workspace,
)
from feedback.models.inbox import CLAIM_TTL
from feedback.privacy import mask_text

if TYPE_CHECKING:
    from django_celery_beat.models import PeriodicTask

    from feedback.selectors.inbox import ItemRef

logger = logging.getLogger(__name__)


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
    files: Sequence[UploadedFile] = (),
) -> Run:
    # The form offers only usable workspaces; this holds for every caller (a crafted POST, a re-run).
    if workspace is not None and not workspace_can_use(workspace=workspace, user=user):
        raise PermissionDenied("This workspace holds another person's uploads.")
    # Before anything is written; QuotaExceeded's message is for the person (feedback/quota.py).
    quota.check_submission(user=user, workspace=workspace, files=files, lock=True)
    if files:
        workspace = workspace_with_uploads(base=workspace, files=files, owner=user)
    task = Task.objects.create(
        text=mask_text(text),
        kind=kind,
        expected_answer=mask_text(expected_answer),
        workspace=workspace,
        created_by=user,
    )
    return _task_queue_run(task=task)


def _task_queue_run(*, task: Task) -> Run:
    # Its sandbox will be a copy of the workspace: reserved now, so the quota counts it from the start.
    reserved = (task.workspace.size_bytes or 0) if task.workspace_id else 0
    run = Run.objects.create(task=task, task_kind=task.kind, sandbox_bytes=reserved)
    queue.run_execute(run.pk)
    return run


def workspace_can_use(*, workspace: Workspace, user: AbstractBaseUser) -> bool:
    """Shared workspaces are everyone's; uploads are their author's, and readable by those who
    read every run (selectors.workspaces_usable_by is the same rule as a query)."""
    return workspace.owner_id is None or workspace.owner_id == user.pk or user.has_perm("feedback.view_run")


def workspace_with_uploads(
    *, base: Workspace | None, files: Sequence[UploadedFile], owner: AbstractBaseUser
) -> Workspace:
    """A new workspace for one task, owned by the uploader: a copy of ``base`` (if any) plus the
    uploaded files. The chosen workspace is shared by other tasks, so uploads never go into it.
    Files are checked by the form (type, size, text); the sandbox decides the path, as it does
    for the agent."""
    workspace = Workspace.objects.create(
        name=f"upload-{uuid.uuid4().hex[:16]}",
        description=f"Uploads on top of {base.name}" if base else "Uploads",
        owner=owner,
    )
    root = workspace.path
    if base is not None and base.path.is_dir():
        shutil.copytree(base.path, root, symlinks=True)
    root.mkdir(parents=True, exist_ok=True)
    for upload in files:
        target = resolve(root, upload.name or "")
        if target.parent != root.resolve():
            raise SandboxError(f"{upload.name!r} is not a plain file name.")
        with target.open("wb") as out:
            for chunk in upload.chunks():
                out.write(chunk)
    workspace.size_bytes = quota.folder_bytes(root)
    workspace.save(update_fields=["size_bytes"])
    return workspace


# --- recurring tasks (django-celery-beat) ------------------------------------------------------
SCHEDULE_TASK = "feedback.tasks.task_scheduled_run_task"
SCHEDULE_PREFIX = "feedback-task-"


def parse_cron(expression: str) -> dict[str, str]:
    """Five cron fields as CrontabSchedule's keyword arguments; ``cron.CronError`` (a ValueError
    whose message names the field at fault) if celery cannot read them, if they never fire, or
    if they fire more often than every ``cron.MIN_GAP_MINUTES``."""

    return check_schedule(expression)


@transaction.atomic
def task_schedule(*, task: Task, repeat: str, every: int | None = None, cron: str = "") -> "PeriodicTask":
    """Make ``task`` run again on a schedule: a beat entry that queues a new run of it."""
    from django_celery_beat.models import CrontabSchedule, IntervalSchedule, PeriodicTask

    schedule: dict = {}
    if repeat in ("minutes", "hours"):
        period = IntervalSchedule.MINUTES if repeat == "minutes" else IntervalSchedule.HOURS
        schedule["interval"], _ = IntervalSchedule.objects.get_or_create(every=every, period=period)
    elif repeat == "cron":
        schedule["crontab"], _ = CrontabSchedule.objects.get_or_create(**parse_cron(cron), timezone="UTC")
    else:
        raise ValueError(f"Unknown repeat {repeat!r}.")
    return PeriodicTask.objects.create(
        name=f"{SCHEDULE_PREFIX}{task.pk}",
        task=SCHEDULE_TASK,
        kwargs=json.dumps({"task_id": task.pk}),
        description=task.text[:200],
        **schedule,
    )


def task_run_scheduled(*, task_id: int) -> Run | None:
    """The beat entry fired: a new run of the same task. None when the task is gone, or when the run
    would take its author past their disk quota (the next firing tries again)."""
    with transaction.atomic():
        task = Task.objects.select_related("workspace", "created_by").filter(pk=task_id).first()
        if task is None:
            return None
        if task.created_by is not None:
            try:
                quota.check_submission(user=task.created_by, workspace=task.workspace, lock=True)
            except quota.QuotaExceeded as refused:
                logger.warning("recurring task %s: no run this time: %s", task_id, refused)
                return None
        return _task_queue_run(task=task)


def schedule_can_control(*, task: Task | None, user: AbstractBaseUser) -> bool:
    return user.has_perm("feedback.score_run") or (
        task is not None and user.has_perm("feedback.add_task") and task.created_by_id == user.pk
    )


@transaction.atomic
def schedule_set_enabled(*, schedule: "PeriodicTask", task: Task | None, user: AbstractBaseUser, enabled: bool) -> None:
    if not schedule_can_control(task=task, user=user):
        raise PermissionDenied
    schedule.enabled = enabled
    schedule.save(update_fields=["enabled"])


@transaction.atomic
def run_cancel(*, run: Run, user: AbstractBaseUser) -> bool:
    """Stop a run. A queued or waiting run ends at once (feedback/lifecycle.py: its pending
    confirmations withdrawn); a running one at its next turn, when its loop reads the request.
    False when it had ended."""
    if not run_can_control(run=run, user=user):
        raise PermissionDenied
    # The request first: its UPDATE holds the run's row to the commit, so a worker pausing the run
    # for a confirmation comes before it (the run waits, and ends below) or after it (the pause
    # does not happen: loop.py), never between.
    if not Run.objects.filter(pk=run.pk, status__in=Run.ACTIVE_STATUSES).update(cancel_requested=True):
        return False
    lifecycle.run_end(run_id=run.pk, status=Run.Status.CANCELLED, error=lifecycle.CANCELLED_BY_A_USER, by=user)
    return True


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
    # The original now counts as an intervention, on its own day.
    Run.objects.filter(pk=new_run.pk).update(retry_of=run)
    new_run.retry_of = run
    return new_run


def run_can_control(*, run: Run, user: AbstractBaseUser) -> bool:
    return user.has_perm("feedback.score_run") or (user.has_perm("feedback.add_task") and run.owner_id == user.pk)


class StaleConfirmation(Exception):
    """The call is no longer its run's to decide (withdrawn when the run ended, or the run is
    not waiting for it): nothing was decided; the message says why, for the person."""


@dataclass(frozen=True)
class ConfirmationDecided:
    confirmation: ToolConfirmation
    resumed: bool  # the run had nothing else waiting and is queued again
    waiting: int  # the run's calls still waiting for a person


@transaction.atomic
def confirmation_decide(
    *, confirmation: ToolConfirmation, user: AbstractBaseUser, approve: bool, reason: str = ""
) -> ConfirmationDecided:
    """Approve or refuse a sensitive tool call of a run waiting for it. When the run has nothing
    else waiting it goes back to the queue: approval runs the call, refusal becomes the model's
    observation. AlreadyDecided when someone decided it first; StaleConfirmation when it was
    withdrawn or its run is not waiting for it."""
    if not user.has_perm("feedback.confirm_toolconfirmation"):
        raise PermissionDenied
    # The run's row first, as a cancel locks it (run_cancel): a cancel and a decision come one
    # after the other, never between one another's writes.
    run = Run.objects.select_for_update().only("status").get(pk=confirmation.run_id)
    current = ToolConfirmation.objects.select_for_update().get(pk=confirmation.pk)
    if current.status == ToolConfirmation.Status.WITHDRAWN:
        raise StaleConfirmation(
            _("This call was withdrawn when run #%(id)s ended (%(status)s): nothing was decided.")
            % {"id": run.pk, "status": run.get_status_display()}
        )
    if current.status != ToolConfirmation.Status.PENDING:
        raise AlreadyDecided(_("This call was already decided by someone else."))
    if run.status != Run.Status.AWAITING_CONFIRMATION:
        raise StaleConfirmation(
            _("Run #%(id)s is not waiting for this call (it is %(status)s): nothing was decided.")
            % {"id": run.pk, "status": run.get_status_display()}
        )
    decided = ToolConfirmation.objects.filter(pk=current.pk, status=ToolConfirmation.Status.PENDING).update(
        status=ToolConfirmation.Status.APPROVED if approve else ToolConfirmation.Status.REJECTED,
        decided_by=user,
        decided_at=timezone.now(),
        reason=mask_text(reason),  # stored like the rest of the confirmation (privacy.py)
    )
    if not decided:  # SQLite takes no row locks: a cancel or a reviewer came first all the same
        raise AlreadyDecided(_("This call was already decided by someone else."))
    waiting = ToolConfirmation.objects.filter(run_id=run.pk, status=ToolConfirmation.Status.PENDING).count()
    resumed = False
    if not waiting:
        resumed = bool(
            Run.objects.filter(pk=run.pk, status=Run.Status.AWAITING_CONFIRMATION).update(status=Run.Status.QUEUED)
        )
        if resumed:
            queue.run_execute(run.pk)
    current.refresh_from_db()
    return ConfirmationDecided(confirmation=current, resumed=resumed, waiting=waiting)


# --- evaluation -----------------------------------------------------------------------------
@transaction.atomic
def run_add_human_score(
    *,
    run: Run,
    user: AbstractBaseUser,
    score: float,
    comment: str = "",
    corrected_answer: str = "",
    outcome: str = "",
    score_values: Sequence[ScoreValue] = (),
) -> Evaluation:
    """A reviewer's score and, if they give one, their verdict on the task (``outcome``:
    accomplished or not_accomplished; "" leaves it to the evaluators). Both outrank the
    automatic ones (see feedback/evaluation/chain.py); it counts as a human intervention.
    ``score_values`` are unsaved values of the score configurations, kept with the evaluation;
    a required configuration without one, or a value outside its configuration, is refused."""

    if not user.has_perm("feedback.score_run"):
        raise PermissionDenied
    if not 0 <= score <= 1:
        raise ValueError("A score is between 0 and 1.")
    verdicts = {"": None, Run.Outcome.ACCOMPLISHED: True, Run.Outcome.NOT_ACCOMPLISHED: False}
    if outcome not in verdicts:
        raise ValueError("An outcome is accomplished, not_accomplished or none.")
    _check_score_values(score_values)
    run = Run.objects.select_for_update().get(pk=run.pk)
    # Filed under the latest round so the page shows it beside the scores it overrides.
    latest = run.evaluations.aggregate(r=Max("round"))["r"] or 1
    evaluation = Evaluation.objects.create(
        run=run,
        round=latest,
        evaluator="human",
        kind=Evaluation.Kind.HUMAN,
        score=score,
        # What a reviewer types can quote the customer: masked like everything else stored.
        feedback=mask_text(comment),
        corrected_answer=mask_text(corrected_answer),
        author=user,
        accomplished=verdicts[outcome],
    )
    for value in score_values:
        value.evaluation = evaluation
    ScoreValue.objects.bulk_create(score_values)
    lifecycle.run_scored(run=run, evaluations=[evaluation])
    return evaluation


def _check_score_values(values: Sequence[ScoreValue]) -> None:
    given = [value.config_id for value in values]
    if len(given) != len(set(given)):
        raise ValueError("One value per score configuration.")
    for value in values:
        if value.config.archived:
            raise ValueError(f"{value.config} is archived.")
        value.clean()  # ValidationError, whose message names the configuration and what it allows
    missing = ScoreConfig.objects.filter(required=True, archived=False).exclude(pk__in=given)
    if missing.exists():
        raise ValueError("Required: " + ", ".join(str(config) for config in missing) + ".")


@transaction.atomic
def run_reevaluate(*, run: Run, user: AbstractBaseUser) -> int:
    """Queue a new round of automatic evaluation; earlier rounds stay as history. Returns the
    round number the worker will write."""
    if not user.has_perm("feedback.score_run"):
        raise PermissionDenied
    if run.is_active:
        raise ValueError("A run is evaluated once it has ended.")
    run = Run.objects.select_for_update().get(pk=run.pk)
    next_round = (run.evaluations.aggregate(r=Max("round"))["r"] or 0) + 1
    queue.run_evaluate(run.pk, expected_round=next_round)
    return next_round


# --- the reviewer inbox ---------------------------------------------------------------------
class AlreadyClaimed(Exception):
    """Another reviewer's claim still holds: nothing changed (take it over to override it)."""


def _inbox_require(*, item: "ItemRef", user: AbstractBaseUser) -> None:
    from feedback.selectors.inbox import KIND_PERMISSIONS

    if not user.has_perm(KIND_PERMISSIONS[item.kind]):
        raise PermissionDenied


@transaction.atomic
def inbox_claim(*, item: "ItemRef", user: AbstractBaseUser, take_over: bool = False) -> InboxClaim:
    """``user`` claims the item: others see it as theirs until they unclaim it, decide it, or the
    claim lapses (CLAIM_TTL). A live claim of someone else raises AlreadyClaimed unless
    ``take_over``, which is said in the page (who held it) rather than done silently."""
    _inbox_require(item=item, user=user)
    now = timezone.now()
    # Lapsed claims hold nothing: cleared here, so claims on items decided elsewhere (their own
    # pages know nothing of claims) do not pile up.
    InboxClaim.objects.filter(claimed_at__lte=now - CLAIM_TTL).exclude(kind=item.kind, object_id=item.pk).delete()
    claim, created = InboxClaim.objects.get_or_create(
        kind=item.kind, object_id=item.pk, defaults={"claimed_by": user, "claimed_at": now}
    )
    if created:
        return claim
    # A conditional UPDATE, so two reviewers claiming at once never both think they hold it.
    mine_or_free = InboxClaim.objects.filter(pk=claim.pk)
    if not take_over:
        mine_or_free = mine_or_free.filter(Q(claimed_by=user) | Q(claimed_at__lte=now - CLAIM_TTL))
    if mine_or_free.update(claimed_by=user, claimed_at=now) != 1:
        raise AlreadyClaimed(_("%(user)s claimed this item first.") % {"user": claim.claimed_by.get_username()})
    claim.refresh_from_db()
    return claim


def inbox_unclaim(*, item: "ItemRef", user: AbstractBaseUser) -> bool:
    """Give the item back; only one's own claim (whether a claim was given back)."""
    _inbox_require(item=item, user=user)
    deleted, _rows = InboxClaim.objects.filter(kind=item.kind, object_id=item.pk, claimed_by=user).delete()
    return bool(deleted)


def inbox_release(*, item: "ItemRef") -> None:
    """The item was decided: whoever held it, there is nothing left to claim."""
    InboxClaim.objects.filter(kind=item.kind, object_id=item.pk).delete()
