"""The metric definitions: each written down once, in this package, and documented in docs/evaluation.md
(Metric definitions). Only production runs count (``Run.purpose``): experiment and playground
runs never enter a metric, a daily row or a live count.

Every metric is computed by the database (annotate/aggregate, TruncDay/TruncWeek), never by a
Python loop over runs; Python only adds up a few hundred per-period rows.

**Closed days from the daily tables, today live.** A day is *closed* once it is over (midnight in
the project's time zone). Closed days are read from DailyRunStats, DailyToolStats and
DailyToolLatency, whose rows are the very queries of this package run over the day's runs
(``daily``: nothing else writes metric tables); today, a window's partial edges and any closed
day not rebuilt yet are counted live from the rows by the same queries. The tables hold every
day from the oldest rebuilt to the newest (``window.built_days``), and a window reads from them
only the days in that span, so before the first rebuild everything is counted live.

**When a closed day is rebuilt** (``daily.days_due``, run by beat every 15 minutes and by
``manage.py rebuild_daily_stats``):

1. the days that closed since the newest rebuilt day (yesterday, once, after midnight);
2. the rebuilt days whose runs changed after their rebuild began (``DailyRunStats.refreshed_at``,
   less a ten-minute margin for transactions that committed late): a run of the day that ended
   (a run still going when its day closed is counted as it was, until it ends), an evaluation
   written for one of its runs (the chain's round, a re-evaluation, a reviewer's score or
   verdict), a run of the day asked for again; a run that ended changes every day from its
   creation's to its end's (an earlier run still going can make a later run's error a
   repeated one). Found by index range scans over the changes since the latest rebuild;
3. the days before the oldest rebuilt one (the first rebuild, a history imported or generated).

So a late change (a reviewer scoring a run of last week) shows on the page within one beat
cycle, and a day's row always equals a live count of that day as of its rebuild. Deleting runs
is not a change the rebuild sees: ``rebuild_daily_stats`` recounts everything.

- ``window``: the window, and its closed days the daily tables answer for;
- ``errors``: what an error is (and the refusals counted apart), for the metrics and the trials;
- ``counts``: the per-period counts, live and from the daily rows;
- ``figures``: the scores, errors, interventions, costs and strategies built from them;
- ``precision``: the outcome's precision against dataset checkers (dataset runs only);
- ``scores``: the reviewers' values of the score configurations (counted live);
- ``tools``: the per-tool figures and their latency histograms;
- ``daily``: the rebuild of closed days.

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
from .errors import ERROR_STEP, GUARDRAIL_REFUSAL, HUMAN_REJECTION, REFUSALS, run_had_error
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
from .precision import outcome_precision
from .scores import reviewer_scores
from .tools import tool_stats
from .window import ENDED, GRANULARITIES, Window, built_days, rate, split_window, whole_days

__all__ = [
    "ENDED",
    "ERROR_COUNTS",
    "ERROR_STEP",
    "GRANULARITIES",
    "GUARDRAIL_REFUSAL",
    "HUMAN_REJECTION",
    "INTERVENTION_REASONS",
    "REFUSALS",
    "Window",
    "built_days",
    "cost_by_kind",
    "cost_summary",
    "cost_trend",
    "error_counts",
    "error_groups",
    "intervention_summary",
    "intervention_trend",
    "outcome_precision",
    "period_counts",
    "rate",
    "repeated_error_summary",
    "repeated_error_trend",
    "reviewer_scores",
    "run_counts",
    "run_had_error",
    "runs_with_intervention_flags",
    "score_summary",
    "score_trend",
    "split_window",
    "strategy_effectiveness",
    "tool_stats",
    "whole_days",
]
