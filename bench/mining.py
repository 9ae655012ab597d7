"""Benchmark 4: the strategy-mining job over the history (100,000 and 1,000,000 runs).

The job lives in feedback/strategies/mining.py: its entry point is ``mine(*, window_days)``. It is
measured over an explicit full year (``window_days=365``: the whole generated history) and, when
the history is larger, over a window of about 100,000 runs. The baseline is the least work any
miner does: one grouped pass over the window's error steps.
"""

import time
from datetime import timedelta

from django.db.models import Count, Max, Min
from django.utils import timezone

from bench.results import Result
from feedback.models import Run, Step
from feedback.strategies.mining import mine

TARGET_SECONDS = 60.0


def _error_pass_seconds(window_days: int) -> float:
    since = timezone.now() - timedelta(days=window_days)
    steps = Step.objects.exclude(error_signature="").filter(
        run_id__in=Run.objects.filter(created_at__gte=since).values("id")
    )
    started = time.perf_counter()
    list(steps.values("error_signature").annotate(n=Count("id")).order_by())
    return time.perf_counter() - started


YEAR_DAYS = 365


def _windows() -> list[tuple[str, int]]:
    """(label, window_days): a full year, and a window of about 100,000 runs when there are more."""
    year = Run.objects.filter(created_at__gte=timezone.now() - timedelta(days=YEAR_DAYS)).count()
    windows = [(f"{year:,} runs (a full year: window_days={YEAR_DAYS})", YEAR_DAYS)]
    total = Run.objects.count()
    if total > 150_000:
        span = Run.objects.aggregate(first=Min("created_at"), last=Max("created_at"))
        days = max(1, round((span["last"] - span["first"]).days * 100_000 / total))
        runs = Run.objects.filter(created_at__gte=timezone.now() - timedelta(days=days)).count()
        windows.insert(0, (f"{runs:,} runs (last {days} days)", days))
    return windows


def run() -> list[Result]:
    results = []
    for label, window_days in _windows():
        baseline = _error_pass_seconds(window_days)
        started = time.perf_counter()
        mine(window_days=window_days)
        elapsed = time.perf_counter() - started
        results.append(Result("mining", f"error-step pass over {label} (baseline)", baseline, "s", baseline))
        results.append(
            Result("mining", f"mining job over {label}", elapsed, "s", baseline, note=f"target < {TARGET_SECONDS:g} s")
        )
    return results
