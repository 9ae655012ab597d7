from django.contrib.auth.decorators import permission_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.translation import gettext as _

from feedback import metrics, selectors
from feedback.forms import MetricsFilterForm


def _chart_data(
    scores: list[dict], errors: list[dict], interventions: list[dict], costs: list[dict], tools: list[dict]
) -> dict:
    """The series metrics.js draws, read by it from a json_script element."""
    return {
        "labels": [row["period"].isoformat() for row in scores],
        "cost": [row["cost"] for row in costs],
        "cost_per_run": [row["cost_per_run"] for row in costs],
        "avg_score": [row["avg_score"] for row in scores],
        "success_rate": [row["success_rate"] for row in scores],
        "repeated_rate": [row["repeated_rate"] for row in errors],
        "repeated_per_run": [row["repeated_per_run"] for row in errors],
        "intervention_rate": [row["rate"] for row in interventions],
        "tools": {
            "names": [row["tool_name"] for row in tools],
            "p50_ms": [row["p50_ms"] for row in tools],
            "p95_ms": [row["p95_ms"] for row in tools],
            "success_rate": [row["success_rate"] for row in tools],
        },
        # The charts' legends and axes, in the page's language.
        "text": {
            "avg_score": _("Average score"),
            "success_rate": _("Success rate (%)"),
            "repeated_rate": _("Repeated-error rate (%)"),
            "repeated_per_run": _("Repeated errors per run"),
            "intervention_rate": _("Human-intervention rate (%)"),
            "cost": _("Cost (USD)"),
            "cost_per_run": _("Cost per run (USD)"),
            "p50": _("p50 (ms, estimate)"),
            "p95": _("p95 (ms, estimate)"),
            "ms": _("ms"),
        },
    }


@permission_required("feedback.view_metrics", raise_exception=True)
def metrics_page(request: HttpRequest) -> HttpResponse:
    # Unbound without a query string, so the selects show the defaults actually in use.
    form = MetricsFilterForm(request.GET or None, initial={"days": 30, "granularity": "day"})
    filters = form.cleaned_data if form.is_bound and form.is_valid() else {}
    window = metrics.Window.last(
        filters.get("days") or 30,
        kind=filters.get("kind") or "",
        granularity=filters.get("granularity") or "day",
    )
    # Counted once (closed days from the daily tables, today live), read by every figure.
    counts = metrics.period_counts(window)
    scores = metrics.score_trend(window, counts)
    errors = metrics.repeated_error_trend(window, counts)
    interventions = metrics.intervention_trend(window, counts)
    costs = metrics.cost_trend(window, counts)
    # From the DailyToolStats rows too (and today live): a year is ~days x kinds x tools rows.
    tools = metrics.tool_stats(window)
    context = {
        "form": form,
        "window": window,
        "score_summary": metrics.score_summary(window, counts),
        "error_summary": metrics.repeated_error_summary(window, counts),
        "intervention_summary": metrics.intervention_summary(window, counts),
        "strategy_summary": metrics.strategy_effectiveness(window),
        "cost_summary": metrics.cost_summary(window, counts),
        "cost_by_kind": metrics.cost_by_kind(window),
        # Dataset runs only (experiments), never production ones; None without dataset checkers.
        "outcome_precision": metrics.outcome_precision(window),
        "reviewer_scores": metrics.reviewer_scores(window),
        # The table lists the periods that had runs, newest first; the charts show every period.
        "rows": [row for row in zip(scores, errors, interventions, costs, strict=True) if row[2]["runs"]][::-1],
        "tools": tools,
        "chart_data": _chart_data(scores, errors, interventions, costs, tools),
        # Now, not over the window: the folders on disk and the people nearest their quota.
        "disk": selectors.disk_figures(),
    }
    return render(request, "feedback/metrics.html", context)
