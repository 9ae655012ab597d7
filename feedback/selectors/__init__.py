"""The read queries behind the pages, one module a job: who sees which run (runs),
the run list (run_listing), workspaces, strategies, evaluation, alerts and the disk.

Every query is re-exported here, so ``selectors.X`` reads as before. The run list's tunable
(SEARCH_FEW_TASKS) is not: it is read, and changed, in run_listing alone.
"""

from .alerts import alert_incidents, alert_rules
from .confirmations import confirmations_waiting
from .disk import disk_figures
from .evaluation import DISAGREEMENT, LOW_SCORE, review_queue, run_evaluations
from .run_listing import (
    RUN_ROW_COLUMNS,
    RUN_SORTS,
    SEARCH_CONFIG,
    RunPage,
    filter_runs,
    run_cursor,
    run_list,
    run_page,
    run_rows,
    search_runs,
)
from .runs import run_applied_strategies, run_visible_to, runs_visible_to
from .strategies import insight_changes, strategy_detail, strategy_list, strategy_prompt_diff
from .workspaces import workspaces_usable_by

__all__ = [
    "DISAGREEMENT",
    "LOW_SCORE",
    "RUN_ROW_COLUMNS",
    "RUN_SORTS",
    "SEARCH_CONFIG",
    "RunPage",
    "alert_incidents",
    "alert_rules",
    "confirmations_waiting",
    "disk_figures",
    "filter_runs",
    "insight_changes",
    "review_queue",
    "run_applied_strategies",
    "run_cursor",
    "run_evaluations",
    "run_list",
    "run_page",
    "run_rows",
    "run_visible_to",
    "runs_visible_to",
    "search_runs",
    "strategy_detail",
    "strategy_list",
    "strategy_prompt_diff",
    "workspaces_usable_by",
]
