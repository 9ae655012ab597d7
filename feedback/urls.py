from django.urls import path

from feedback.views import confirmations, home, runs, strategies, tasks

urlpatterns = [
    path("", home.home, name="feedback-home"),
    path("tasks/new/", tasks.task_submit, name="feedback-task-submit"),
    path("runs/", runs.run_list, name="feedback-run-list"),
    path("runs/<int:run_id>/", runs.run_detail, name="feedback-run-detail"),
    path("runs/<int:run_id>/cancel/", runs.run_cancel, name="feedback-run-cancel"),
    path("runs/<int:run_id>/rerun/", runs.run_rerun, name="feedback-run-rerun"),
    path("strategies/", strategies.strategy_list, name="feedback-strategy-list"),
    path("confirmations/", confirmations.confirmation_list, name="feedback-confirmation-list"),
    path(
        "confirmations/<int:confirmation_id>/decide/",
        confirmations.confirmation_decide,
        name="feedback-confirmation-decide",
    ),
]
