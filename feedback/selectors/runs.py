"""Who sees which run and the strategies applied to it."""

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import QuerySet

from feedback.models import AppliedStrategy, Run


def runs_visible_to(user: AbstractBaseUser) -> QuerySet[Run]:
    """Operators and reviewers see every run; staff see the runs of their own tasks."""
    runs = Run.objects.all()
    if not user.has_perm("feedback.view_run"):
        runs = runs.filter(task__created_by=user)
    return runs


def run_visible_to(user: AbstractBaseUser, *, owner_id: int | None) -> bool:
    """``runs_visible_to``'s rule for one run whose task ``owner_id`` submitted."""
    return user.has_perm("feedback.view_run") or (owner_id is not None and owner_id == user.pk)


def run_applied_strategies(run: Run) -> QuerySet[AppliedStrategy]:
    return run.applied_strategies.select_related("strategy_version__strategy").order_by("id")
