"""The three roles as Django groups, and what each may do.

Groups are (re)built after every migrate, so a fresh database always has them and a changed
mapping here reaches existing databases without a hand-written data migration.
"""

from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import Group, Permission

STAFF = "staff"
OPERATOR = "operator"
REVIEWER = "reviewer"

_OPERATOR_PERMS = [
    "view_task",
    "view_workspace",
    "view_run",
    "view_step",
    "view_stepattempt",
    "view_evaluation",
    "view_appliedstrategy",
    "view_strategy",
    "view_strategyversion",
    "view_strategyevent",
    "view_toolconfirmation",
    "view_metrics",
    "view_alertrule",
    "view_alertincident",
    "view_alertdelivery",
    "view_alertattempt",
    # Datasets hold tasks and answers copied from runs: those who read every run keep them.
    "view_dataset",
    "add_dataset",
    # Paired experiments run a change on a dataset's items, apart from production (a strategy's
    # experiment is a reviewer's decision besides: decide_strategy).
    "view_experiment",
    "add_experiment",
    # The playground re-runs a run with an edited prompt (measured apart, like an experiment).
    "view_playgroundrun",
    "add_playgroundrun",
]

# The Settings pages (feedback/views/settings_*.py): operators run the system, so they keep its
# alert rules, MCP servers, model prices, tools and score configurations; reviewers judge
# strategies and do not.
SETTINGS_PERMS = [
    "add_alertrule",
    "change_alertrule",
    "delete_alertrule",
    "view_mcpserver",
    "add_mcpserver",
    "change_mcpserver",
    "delete_mcpserver",
    "view_modelprice",
    "add_modelprice",
    "change_modelprice",
    "delete_modelprice",
    "view_toolsetting",
    "change_toolsetting",
    "view_scoreconfig",
    "add_scoreconfig",
    "change_scoreconfig",
    "delete_scoreconfig",
]

ROLE_PERMISSIONS: dict[str, list[str]] = {
    STAFF: ["add_task", "view_workspace"],
    OPERATOR: [*_OPERATOR_PERMS, *SETTINGS_PERMS],
    REVIEWER: [
        *_OPERATOR_PERMS,
        "decide_strategy",
        "change_strategy",
        "score_run",
        "confirm_toolconfirmation",
    ],
}


def ensure_groups(**kwargs) -> None:
    perms = {p.codename: p for p in Permission.objects.filter(content_type__app_label="feedback")}
    for role, codenames in ROLE_PERMISSIONS.items():
        group, _ = Group.objects.get_or_create(name=role)
        group.permissions.set([perms[c] for c in codenames if c in perms])


class RoleBackend(ModelBackend):
    """Django's ModelBackend, reading a person's permissions (their own and their groups', where
    the roles are) in one query instead of two: every page asks, through the navigation."""

    def get_all_permissions(self, user_obj, obj=None) -> set[str]:
        if not user_obj.is_active or user_obj.is_anonymous or obj is not None:
            return set()
        if not hasattr(user_obj, "_perm_cache"):
            names = ("content_type__app_label", "codename")
            if user_obj.is_superuser:
                rows = Permission.objects.values_list(*names)
            else:
                own = Permission.objects.filter(user=user_obj).values_list(*names).order_by()
                rows = own.union(Permission.objects.filter(group__user=user_obj).values_list(*names).order_by())
            user_obj._perm_cache = {f"{app}.{codename}" for app, codename in rows}
        return user_obj._perm_cache
