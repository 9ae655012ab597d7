"""The metrics as the API answers them (GET /metrics): the figures of feedback/metrics/ and
selectors.disk_figures, as the metrics page has them, read by the output schemas of outputs.py's kind."""

from datetime import date, datetime

from pydantic import Field

from .outputs import Out, nullable_path_field, path_field


class ScoreFigures(Out):
    runs: int
    scored: int
    avg_score: float | None
    succeeded: int
    accomplished: int
    unknown: int
    success_rate: float | None


class ErrorFigures(Out):
    errors: int
    repeated: int
    runs_with_repeated: int
    runs: int
    repeated_rate: float | None
    repeated_per_run: float | None


class InterventionFigures(Out):
    runs: int
    intervened: int
    confirmed: int
    human_scored: int
    retried: int
    cancelled: int
    rate: float | None


class StrategyFigures(Out):
    finished: int
    improved: int
    ratio: float | None


class PeriodOut(Out):
    period: date
    scores: ScoreFigures
    errors: ErrorFigures
    interventions: InterventionFigures


class ToolFigures(Out):
    tool_name: str
    calls: int
    succeeded: int
    success_rate: float | None
    retries: int
    avg_ms: float | None
    p50_ms: float | None
    p95_ms: float | None


class DiskUserFigures(Out):
    user: str
    uploads: int
    sandboxes: int
    total: int
    share: float | None = Field(description="Of the quota (above 1 when over it); null without a quota")


class DiskFigures(Out):
    """Now, whatever the window: sizes in bytes, as recorded when the files were written."""

    # selectors.disk_figures is nested by what it measures; the API's figures are flat.
    workspaces_bytes: int = path_field("workspaces", "bytes")
    workspaces: int = path_field("workspaces", "count")
    upload_workspaces: int = path_field("workspaces", "uploads")
    unmeasured_workspaces: int = path_field("workspaces", "unmeasured")
    sandboxes_bytes: int = path_field(
        "sandboxes", "bytes", description="Run sandboxes kept (a queued run's reserved at its workspace's size)"
    )
    sandboxes_kept: int = path_field("sandboxes", "count")
    sandboxes_of_active_runs: int = path_field("sandboxes", "active")
    # Null when no ended run's sandbox is kept.
    oldest_sandbox_run_id: int | None = nullable_path_field("sandboxes", "oldest", "pk")
    oldest_sandbox_ended_at: datetime | None = nullable_path_field("sandboxes", "oldest", "finished_at")
    retention_days: int = Field(description="RUN_SANDBOX_RETENTION_DAYS; 0: kept forever")
    next_cleanup_at: datetime | None = path_field("next_cleanup")
    quota_bytes: int = Field(description="Per person (DISK_QUOTA_MB); 0: no quota")
    nearest_quota: list[DiskUserFigures] = path_field("nearest")


class MetricsOut(Out):
    since: datetime
    until: datetime
    kind: str
    granularity: str
    scores: ScoreFigures
    errors: ErrorFigures
    interventions: InterventionFigures
    strategies: StrategyFigures
    periods: list[PeriodOut]
    tools: list[ToolFigures]
    disk: DiskFigures
