from django.http import HttpRequest


def roles(request: HttpRequest) -> dict:
    """What the navigation shows: one flag per capability, not per group name."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {
        "can_submit": user.has_perm("feedback.add_task"),
        "can_view_runs": user.has_perm("feedback.view_run"),
        "can_view_metrics": user.has_perm("feedback.view_metrics"),
        "can_view_strategies": user.has_perm("feedback.view_strategy"),
        "can_decide": user.has_perm("feedback.decide_strategy"),
        "can_confirm": user.has_perm("feedback.confirm_toolconfirmation"),
        "can_score": user.has_perm("feedback.score_run"),
        "can_view_alerts": user.has_perm("feedback.view_alertincident"),
        "can_view_datasets": user.has_perm("feedback.view_dataset"),
        "can_view_experiments": user.has_perm("feedback.view_experiment"),
        "can_edit_settings": user.has_perm("feedback.change_alertrule"),
    }
