"""The metric definitions: each written down once, in this package, and documented in the README (Metric definitions).

Every metric is computed by the database (annotate/aggregate, TruncDay/TruncWeek), never by a
Python loop over runs. The trends read whole days from the DailyRunStats rollups, which are
counted by the very queries of ``counts`` (feedback/rollups.py), and count the partial days at the
window's edges live; Python only adds up a few hundred per-period rows. The per-tool figures
follow the same pattern in feedback/tool_metrics.py.

A run belongs to the period of its ``created_at``; the filters are a window ``[since, until)``
and optionally one task kind. Rates are ``None`` when their
denominator is zero (no data is not a rate of 0).

- ``window``: the window, and its whole days and months, which the rollups answer for;
- ``counts``: the per-period counts, live and from the rollups;
- ``figures``: the scores, errors, interventions, costs and strategies built from them.

Callers use ``from feedback import metrics; metrics.X``: every public name is re-exported here.
A test that patches a name patches it in the submodule that looks it up, not here.
"""

from .counts import (
    ERROR_COUNTS,
    INTERVENTION_REASONS,
    error_counts,
    error_groups,
    period_counts,
    run_counts,
    runs_with_intervention_flags,
)
from .figures import (
    cost_by_kind,
    cost_summary,
    cost_trend,
    intervention_summary,
    intervention_trend,
    repeated_error_summary,
    repeated_error_trend,
    score_summary,
    score_trend,
    strategy_effectiveness,
)
from .window import (
    ENDED,
    GRANULARITIES,
    Window,
    rate,
    split_window,
    whole_days,
    whole_months,
    whole_periods,
)

__all__ = [
    "ENDED",
    "ERROR_COUNTS",
    "GRANULARITIES",
    "INTERVENTION_REASONS",
    "Window",
    "cost_by_kind",
    "cost_summary",
    "cost_trend",
    "error_counts",
    "error_groups",
    "intervention_summary",
    "intervention_trend",
    "period_counts",
    "rate",
    "repeated_error_summary",
    "repeated_error_trend",
    "run_counts",
    "runs_with_intervention_flags",
    "score_summary",
    "score_trend",
    "split_window",
    "strategy_effectiveness",
    "whole_days",
    "whole_months",
    "whole_periods",
]
