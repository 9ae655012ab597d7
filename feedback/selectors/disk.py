"""What the workspaces and the run sandboxes take on disk, from the sizes recorded when they were
written (feedback/quota.py): no walk of the disk."""

from django.db.models import Count, Q, Sum

from feedback import quota, retention
from feedback.models import Run, Workspace

NEAREST_SHOWN = 5


def disk_figures(*, nearest: int = NEAREST_SHOWN) -> dict:
    """The metrics page's disk figures: the workspaces (uploads among them), the sandboxes kept (those
    of active runs among them, a queued one's reserved at its workspace's size) and the oldest, the
    retention policy and its next clean-up, the quota and the people nearest it."""
    workspaces = Workspace.objects.aggregate(
        bytes=Sum("size_bytes", default=0),
        count=Count("pk"),
        uploads=Count("pk", filter=Q(owner__isnull=False)),
        unmeasured=Count("pk", filter=Q(size_bytes__isnull=True)),
    )
    kept = Run.objects.filter(quota.SANDBOX_KEPT)
    sandboxes = kept.aggregate(
        bytes=Sum("sandbox_bytes", default=0),
        count=Count("pk"),
        active=Count("pk", filter=Q(status__in=Run.ACTIVE_STATUSES)),
    )
    oldest = (
        kept.exclude(status__in=Run.ACTIVE_STATUSES)
        .filter(finished_at__isnull=False)
        .order_by("finished_at", "pk")
        .values("pk", "finished_at")
        .first()
    )
    if oldest is not None:
        oldest["removal_due"] = retention.removal_due(oldest["finished_at"])
    return {
        "workspaces": workspaces,
        "sandboxes": {**sandboxes, "oldest": oldest},
        "retention_days": retention.retention_days(),
        "next_cleanup": retention.next_cleanup(),
        "quota_bytes": quota.quota_bytes(),
        "nearest": quota.users_nearest_quota(nearest),
    }
