"""The workspaces a person may start a run from."""

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import BooleanField, ExpressionWrapper, Q, QuerySet

from feedback.models import Workspace


def workspaces_usable_by(user: AbstractBaseUser) -> QuerySet[Workspace]:
    """The workspaces ``user`` may start a run from (the rule of services.workspace_can_use):
    the shared ones first, then their own uploads, then others' (for those who read every run),
    newest first."""
    workspaces = Workspace.objects.all()
    if not user.has_perm("feedback.view_run"):
        workspaces = workspaces.filter(Q(owner=None) | Q(owner=user.pk))
    shared = ExpressionWrapper(Q(owner=None), output_field=BooleanField())
    own = ExpressionWrapper(Q(owner=user.pk), output_field=BooleanField())
    return workspaces.select_related("owner").order_by(shared.desc(), own.desc(), "-created_at", "name")
