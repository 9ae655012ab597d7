"""Recorded values as span values: times in nanoseconds, attributes, JSON, a run's error.type."""

import json
from datetime import datetime
from typing import Any

from feedback.models import Run

# error.type of a failed or cancelled run, from the beginning of the reason the loop recorded.
_RUN_ERRORS = (
    ("Step limit", "step_limit"),
    ("Time limit", "time_limit"),
    ("The model could not be reached", "model_unreachable"),
    ("The model gave", "unusable_replies"),
    ("Stopped: the same call failed", "repeated_failure"),
    ("Internal error", "internal_error"),
)


def _nanos(moment: datetime) -> int:
    return int(moment.timestamp()) * 1_000_000_000 + moment.microsecond * 1000


def _attributes(values: dict[str, Any]) -> dict[str, Any]:
    """Without the values OpenTelemetry cannot carry (None) or that say nothing (empty)."""
    return {k: v for k, v in values.items() if v is not None and v != "" and v != []}


def _json(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def _run_error(run: Run) -> str:
    if run.status == Run.Status.CANCELLED:
        return "cancelled"
    if run.status != Run.Status.FAILED:
        return ""
    return next((kind for start, kind in _RUN_ERRORS if run.error.startswith(start)), "_OTHER")
