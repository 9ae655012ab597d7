"""Each person's disk quota (DISK_QUOTA_MB): the folders their submissions make them take.

Two kinds of folder count, both by the sizes recorded when they were written (no page walks the
disk): their **upload workspaces** (a copy of the chosen workspace plus their files, kept until an
operator deletes the workspace) and the **sandboxes** of their runs still kept (each run's own copy
of its workspace, reserved at the workspace's size when the run is queued, measured when it ends,
removed RUN_SANDBOX_RETENTION_DAYS after it ended: feedback/retention.py). A re-run uploads nothing
but makes a sandbox, so it counts too; without the sandboxes a person could re-run one large upload
until the disk is full.

A submission (the task form, the API, a re-run, a recurring task's next run) that would take its
author past the quota is refused before anything is written. The form says so as its error; the
service checks again under a lock on the person's row, so a burst of submissions cannot all pass
the check before any of them is written.
"""

import logging
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.core.files.uploadedfile import UploadedFile
from django.db import transaction
from django.db.models import Q, Sum
from django.db.models.signals import post_delete
from django.dispatch import receiver
from django.template.defaultfilters import filesizeformat
from django.utils.translation import gettext as _

from feedback.models import Run, Workspace

logger = logging.getLogger(__name__)

MB = 1024 * 1024
# A sandbox still on disk: recorded (or reserved) and not removed by the retention policy.
SANDBOX_KEPT = Q(sandbox_bytes__isnull=False, sandbox_deleted_at__isnull=True)


@dataclass(frozen=True)
class Usage:
    """What one person's folders take, in bytes; ``quota`` 0: no quota."""

    uploads: int
    sandboxes: int
    quota: int

    @property
    def total(self) -> int:
        return self.uploads + self.sandboxes

    @property
    def share(self) -> float | None:
        """The part of the quota used (above 1 when over it); None without a quota."""
        return self.total / self.quota if self.quota else None


class QuotaExceeded(Exception):
    """A submission that would take its author past their quota; the message, for them, says
    what they use, the quota and what to do."""

    def __init__(self, usage: Usage, needed: int) -> None:
        self.usage, self.needed = usage, needed
        super().__init__(refusal_message(usage, needed))


def quota_bytes() -> int:
    return settings.DISK_QUOTA_MB * MB


def folder_bytes(path: Path) -> int:
    """The bytes of the files under ``path`` (links as links, never followed); 0 if it is gone."""
    total = 0
    for folder, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except FileNotFoundError:
                continue  # removed while we counted
    return total


def usage_of(user: AbstractBaseUser) -> Usage:
    uploads = Workspace.objects.filter(owner=user.pk).aggregate(n=Sum("size_bytes"))["n"] or 0
    sandboxes = Run.objects.filter(SANDBOX_KEPT, task__created_by=user.pk).aggregate(n=Sum("sandbox_bytes"))["n"] or 0
    return Usage(uploads=uploads, sandboxes=sandboxes, quota=quota_bytes())


def submission_bytes(*, workspace: Workspace | None, files: Sequence[UploadedFile] = ()) -> int:
    """What a submission adds: with files, a new workspace (the chosen one's copy plus the files)
    and its run's sandbox, a copy of that; without, the run's sandbox, a copy of the chosen one."""
    base = (workspace.size_bytes or 0) if workspace is not None else 0
    if not files:
        return base
    return 2 * (base + sum(upload.size or 0 for upload in files))


def check_submission(
    *, user: AbstractBaseUser, workspace: Workspace | None, files: Sequence[UploadedFile] = (), lock: bool = False
) -> None:
    """Raise QuotaExceeded if the submission would take ``user`` past their quota. ``lock`` (in the
    transaction that then writes it): hold the person's row until it commits, so their next
    submission is checked with this one's folders counted."""
    if not settings.DISK_QUOTA_MB:
        return
    if lock:
        list(get_user_model().objects.select_for_update().filter(pk=user.pk).values_list("pk", flat=True))
    usage = usage_of(user)
    needed = submission_bytes(workspace=workspace, files=files)
    if needed and usage.total + needed > usage.quota:
        raise QuotaExceeded(usage, needed)


def refusal_message(usage: Usage, needed: int) -> str:
    days = settings.RUN_SANDBOX_RETENTION_DAYS
    kept = (
        _("each run's copy is removed %(days)s days after the run ends") % {"days": days}
        if days
        else _("runs' copies are kept")
    )
    return _(
        "Not submitted: it needs %(needed)s of disk, and your files already take %(used)s of your %(quota)s "
        "quota (uploads %(uploads)s, copies your runs work on %(sandboxes)s; %(kept)s). Choose one of your "
        "earlier uploads as the workspace instead of uploading the files again, or upload fewer or smaller "
        "files; an operator can delete uploads you no longer need, or raise the quota."
    ) % {
        "needed": filesizeformat(needed),
        "used": filesizeformat(usage.total),
        "quota": filesizeformat(usage.quota),
        "uploads": filesizeformat(usage.uploads),
        "sandboxes": filesizeformat(usage.sandboxes),
        "kept": kept,
    }


def users_nearest_quota(limit: int = 5) -> list[dict]:
    """The people whose folders take the most, most first: ``user`` (username), ``uploads``,
    ``sandboxes``, ``total`` (bytes) and ``share`` of the quota (None without one)."""
    totals: dict[int, list[int]] = {}
    uploads = Workspace.objects.filter(owner__isnull=False).values_list("owner")
    for owner, size in uploads.annotate(n=Sum("size_bytes")).order_by():
        totals.setdefault(owner, [0, 0])[0] = size or 0
    kept = Run.objects.filter(SANDBOX_KEPT, task__created_by__isnull=False).values_list("task__created_by")
    for owner, size in kept.annotate(n=Sum("sandbox_bytes")).order_by():
        totals.setdefault(owner, [0, 0])[1] = size or 0
    top = sorted(totals.items(), key=lambda item: (-sum(item[1]), item[0]))[:limit]
    User = get_user_model()
    names = dict(User.objects.filter(pk__in=[pk for pk, _ in top]).values_list("pk", User.USERNAME_FIELD))
    quota = quota_bytes()
    return [
        {
            "user": names.get(pk, ""),
            "uploads": uploads,
            "sandboxes": sandboxes,
            "total": uploads + sandboxes,
            "share": (uploads + sandboxes) / quota if quota else None,
        }
        for pk, (uploads, sandboxes) in top
        if uploads + sandboxes
    ]


def workspaces_measure(limit: int = 200) -> int:
    """Record the size of workspaces not measured yet (folders put there by hand, uploads from
    before sizes were recorded); returns how many. For beat's clean-up, never a page."""
    measured = 0
    for workspace in Workspace.objects.filter(size_bytes__isnull=True).order_by("pk")[:limit]:
        size = folder_bytes(workspace.path)
        measured += Workspace.objects.filter(pk=workspace.pk, size_bytes__isnull=True).update(size_bytes=size)
    return measured


@receiver(post_delete, sender=Workspace)
def _remove_upload_folder(sender, instance: Workspace, **kwargs) -> None:
    # An upload workspace's folder is the app's own and goes with its row (deleted in the admin, or
    # with its owner), once that is committed; a shared one's is whoever put it there's.
    if instance.owner_id is None:
        return
    path = instance.path

    def remove() -> None:
        try:
            shutil.rmtree(path)
        except FileNotFoundError:
            pass
        except OSError:
            logger.exception("could not remove the folder of deleted workspace %s", instance.name)

    transaction.on_commit(remove)
