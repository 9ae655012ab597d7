from django.urls import path

from feedback.views import confirmations, evaluation, health, home, metrics, runs, schedules, strategies, tasks, trace

urlpatterns = [
    path("", home.home, name="feedback-home"),
    path("healthz", health.healthz, name="feedback-healthz"),
    path("tasks/new/", tasks.task_submit, name="feedback-task-submit"),
    path("schedules/", schedules.schedule_list, name="feedback-schedule-list"),
    path("schedules/<int:schedule_id>/toggle/", schedules.schedule_toggle, name="feedback-schedule-toggle"),
    path("runs/", runs.run_list, name="feedback-run-list"),
    path("runs/poll/", runs.run_list_poll, name="feedback-run-list-poll"),
    path("runs/<int:run_id>/", runs.run_detail, name="feedback-run-detail"),
    # The run page's parts, one per URL: what its poller and its loaders ask for.
    path("runs/<int:run_id>/summary/", runs.run_summary, name="feedback-run-summary"),
    path("runs/<int:run_id>/steps/", runs.run_steps, name="feedback-run-steps"),
    path("runs/<int:run_id>/evaluations/", evaluation.run_evaluations, name="feedback-run-evaluations"),
    path("runs/<int:run_id>/child/", runs.run_child, name="feedback-run-child"),
    path("runs/<int:run_id>/trace.json", trace.run_trace_json, name="feedback-run-trace-json"),
    path("runs/<int:run_id>/cancel/", runs.run_cancel, name="feedback-run-cancel"),
    path("runs/<int:run_id>/rerun/", runs.run_rerun, name="feedback-run-rerun"),
    path("runs/<int:run_id>/score/", evaluation.run_score, name="feedback-run-score"),
    path("runs/<int:run_id>/reevaluate/", evaluation.run_reevaluate, name="feedback-run-reevaluate"),
    path("review/", evaluation.review_queue, name="feedback-review-queue"),
    path("metrics/", metrics.metrics_page, name="feedback-metrics"),
    path("strategies/", strategies.strategy_list, name="feedback-strategy-list"),
    path("strategies/mine/", strategies.strategies_mine, name="feedback-strategies-mine"),
    path("strategies/schedule/", strategies.strategies_schedule, name="feedback-strategies-schedule"),
    path("strategies/demo-loop/", strategies.strategies_demo_loop, name="feedback-strategies-demo-loop"),
    path("strategies/<int:strategy_id>/", strategies.strategy_detail, name="feedback-strategy-detail"),
    path("strategies/<int:strategy_id>/decide/", strategies.strategy_decide, name="feedback-strategy-decide"),
    path("strategies/<int:strategy_id>/edit/", strategies.strategy_edit, name="feedback-strategy-edit"),
    path("confirmations/", confirmations.confirmation_list, name="feedback-confirmation-list"),
    path(
        "confirmations/<int:confirmation_id>/decide/",
        confirmations.confirmation_decide,
        name="feedback-confirmation-decide",
    ),
]
