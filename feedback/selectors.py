"""The read queries behind the pages."""

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import QuerySet

from feedback.models import Run, Step, Strategy


def runs_visible_to(user: AbstractBaseUser) -> QuerySet[Run]:
    """Operators and reviewers see every run; staff see the runs of their own tasks."""
    runs = Run.objects.all()
    if not user.has_perm("feedback.view_run"):
        runs = runs.filter(task__created_by=user)
    return runs


def run_list(user: AbstractBaseUser, *, status: str = "", kind: str = "") -> QuerySet[Run]:
    runs = runs_visible_to(user).select_related("task", "task__created_by").order_by("-created_at", "-id")
    if status:
        runs = runs.filter(status=status)
    if kind:
        runs = runs.filter(task_kind=kind)
    return runs


def run_steps(run: Run) -> QuerySet[Step]:
    return run.steps.order_by("index").prefetch_related("attempt_rows")


def strategy_list(*, status: str = "") -> QuerySet[Strategy]:
    strategies = Strategy.objects.select_related("current_version").order_by("-updated_at")
    if status:
        strategies = strategies.filter(status=status)
    return strategies
