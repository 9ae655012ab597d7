from django.contrib.auth.decorators import permission_required
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from feedback import metrics, pagecache
from feedback.forms import MetricsFilterForm

CACHED_TOOL_STATS_DAYS = 90
TOOL_STATS_CACHE_SECONDS = 300
TOOL_STATS_LOCK_SECONDS = 60


def _cached_tool_stats(window: metrics.Window, key: str) -> list[dict]:
    """The window's tool stats from the cache; on a miss one request computes them while the
    others wait for its result, instead of twenty clients each starting the same seconds-long
    scan at once (a stampede that made a cold year-long page time out under load)."""
    tools = cache.get(key)
    if tools is not None:
        return tools
    lock = f"{key}:computing"
    if cache.add(lock, 1, timeout=TOOL_STATS_LOCK_SECONDS):
        try:
            tools = metrics.tool_stats(window)
            cache.set(key, tools, TOOL_STATS_CACHE_SECONDS)
            return tools
        finally:
            cache.delete(lock)
    tools = pagecache.wait_for_result(key, lock, accept=lambda _: True, seconds=TOOL_STATS_LOCK_SECONDS)
    return tools if tools is not None else metrics.tool_stats(window)  # the computing request died


def _chart_data(scores: list[dict], errors: list[dict], interventions: list[dict], tools: list[dict]) -> dict:
    """The series metrics.js draws, read by it from a json_script element."""
    return {
        "labels": [row["period"].isoformat() for row in scores],
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
    }


@pagecache.cached_page
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
    # Counted once (rollups for whole days, live queries for the edges), read by every figure.
    counts = metrics.period_counts(window)
    scores = metrics.score_trend(window, counts)
    errors = metrics.repeated_error_trend(window, counts)
    interventions = metrics.intervention_trend(window, counts)
    days = filters.get("days") or 30
    if days >= CACHED_TOOL_STATS_DAYS:
        # Exact per-tool percentiles scan every call of the window: millions of steps over a
        # year, and a year's percentiles do not move in a few minutes.
        tools = _cached_tool_stats(window, f"metrics-tool-stats:{days}:{window.kind}")
    else:
        tools = metrics.tool_stats(window)
    context = {
        "form": form,
        "window": window,
        "score_summary": metrics.score_summary(window, counts),
        "error_summary": metrics.repeated_error_summary(window, counts),
        "intervention_summary": metrics.intervention_summary(window, counts),
        "strategy_summary": metrics.strategy_effectiveness(window),
        # The table lists the periods that had runs, newest first; the charts show every period.
        "rows": [row for row in zip(scores, errors, interventions, strict=True) if row[2]["runs"]][::-1],
        "tools": tools,
        "chart_data": _chart_data(scores, errors, interventions, tools),
    }
    return render(request, "feedback/metrics.html", context)
