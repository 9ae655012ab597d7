from django.urls import path

from feedback.views import confirmations, evaluation, health, home, metrics, runs, strategies, tasks

urlpatterns = [
    path("", home.home, name="feedback-home"),
    path("healthz", health.healthz, name="feedback-healthz"),
    path("tasks/new/", tasks.task_submit, name="feedback-task-submit"),
    path("runs/", runs.run_list, name="feedback-run-list"),
    path("runs/<int:run_id>/", runs.run_detail, name="feedback-run-detail"),
    path("runs/<int:run_id>/cancel/", runs.run_cancel, name="feedback-run-cancel"),
    path("runs/<int:run_id>/rerun/", runs.run_rerun, name="feedback-run-rerun"),
    path("runs/<int:run_id>/score/", evaluation.run_score, name="feedback-run-score"),
    path("runs/<int:run_id>/reevaluate/", evaluation.run_reevaluate, name="feedback-run-reevaluate"),
    path("review/", evaluation.review_queue, name="feedback-review-queue"),
    path("metrics/", metrics.metrics_page, name="feedback-metrics"),
    path("strategies/", strategies.strategy_list, name="feedback-strategy-list"),
    path("confirmations/", confirmations.confirmation_list, name="feedback-confirmation-list"),
    path(
        "confirmations/<int:confirmation_id>/decide/",
        confirmations.confirmation_decide,
        name="feedback-confirmation-decide",
    ),
]
