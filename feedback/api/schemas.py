"""What the API reads and writes, as pydantic models: they give the OpenAPI document its shapes and
refuse a body of the wrong shape (a wrong type, an unknown field) before anything runs. The rules
of the domain (a task's length, a usable workspace, a text file, a reason for a decision) are the
site's forms', applied by the endpoints, so the API and the pages accept exactly the same things."""

from datetime import date, datetime
from typing import Annotated, Any, Literal

from ninja import Schema
from pydantic import ConfigDict, Field, Strict

from feedback.forms import SAFE_NAME, UPLOAD_MAX_BYTES, UPLOAD_MAX_FILES
from feedback.models import Run, Strategy, Task

# JSON text as it is: a number or a list is not a string here (pydantic would not convert them
# anyway, but says so plainly in strict mode).
Text = Annotated[str, Strict()]
Integer = Annotated[int, Strict()]

ISO_DATE = r"^\d{4}-\d{2}-\d{2}$"

TaskKind = Literal[tuple(Task.Kind.values)]  # type: ignore[valid-type]
RunStatus = Literal[tuple(Run.Status.values)]  # type: ignore[valid-type]
RunOutcome = Literal[tuple(Run.Outcome.values)]  # type: ignore[valid-type]
StrategyStatus = Literal[tuple(Strategy.Status.values)]  # type: ignore[valid-type]


class Body(Schema):
    """A request body: unknown fields are refused (a misspelt optional field would otherwise be
    silently ignored). Strings JSON can carry but no database can store (unpaired surrogates such
    as "\\ud800") are refused by pydantic itself; NUL characters by the forms."""

    model_config = ConfigDict(extra="forbid")


# --- requests -----------------------------------------------------------------------------------
class FileIn(Body):
    # Checked as given: an uploaded file's name would lose any folder part before the form saw it.
    name: Text = Field(pattern=SAFE_NAME.pattern, description="A plain file name: .txt .md .csv .json .log")
    content: Text = Field(max_length=UPLOAD_MAX_BYTES, description="The file's text (UTF-8, at most 1 MB)")


class TaskIn(Body):
    kind: TaskKind = Task.Kind.GENERAL.value
    text: Text = Field(max_length=Task.TEXT_MAX_LENGTH, description="The task, at least 5 characters")
    expected_answer: Text = Field("", max_length=Task.TEXT_MAX_LENGTH)
    workspace_id: Integer | None = Field(None, description="A workspace from GET /workspaces; none: an empty one")
    files: list[FileIn] = Field(
        default_factory=list, max_length=UPLOAD_MAX_FILES, description="Text files added to a copy of the workspace"
    )


class ScoreIn(Body):
    score: Annotated[float, Strict()] = Field(ge=0, le=1)
    comment: Text = Field("", max_length=4000)
    corrected_answer: Text = Field("", max_length=Task.TEXT_MAX_LENGTH)
    outcome: Literal["accomplished", "not_accomplished", ""] = Field(
        "", description='Your verdict on the task; "" leaves it to the evaluators'
    )


class DecisionIn(Body):
    action: Literal["approve", "reject", "promote", "promote_override", "roll_back"]
    reason: Text = Field(max_length=2000, description="Why: every decision needs one (it goes into the audit log)")
    trial_fraction: Annotated[float, Strict()] | None = Field(
        None, ge=0.05, le=0.95, description="On approve: the share of matching runs given the strategy"
    )


class RunQuery(Schema):
    """The run list's filters, as the run list page has them."""

    q: str | None = Field(None, max_length=200, description="Full-text search over the task text")
    status: RunStatus | None = None
    outcome: RunOutcome | None = None
    kind: TaskKind | None = None
    score_min: float | None = Field(None, ge=0, le=1)
    score_max: float | None = Field(None, ge=0, le=1)
    tool: str | None = Field(None, description="Runs that called this tool")
    error: str | None = Field(None, description="Runs with an error signature starting with these 4-40 hex digits")
    strategy: int | None = Field(None, description="Runs a strategy was applied to (not its trial's control arm)")
    # Text in the form's format, read by the form: pydantic would also take 0 as 1970-01-01.
    since: str | None = Field(None, pattern=ISO_DATE, json_schema_extra={"format": "date"}, description="YYYY-MM-DD")
    until: str | None = Field(None, pattern=ISO_DATE, json_schema_extra={"format": "date"}, description="YYYY-MM-DD")
    sort: Literal["newest", "oldest", "score"] = "newest"
    cursor: str | None = Field(None, description="next_cursor or previous_cursor of a page")
    limit: int = Field(50, ge=1, le=100)


class StepQuery(Schema):
    after: int = Field(-1, ge=-1, description="The steps after this index (next_after of the page before)")
    limit: int = Field(100, ge=1, le=500)


class MetricsQuery(Schema):
    # An int with the form's choices (a Literal of ints would refuse the query string's "7").
    days: int = Field(30, json_schema_extra={"enum": [7, 30, 90, 365]}, description="The last 7, 30, 90 or 365 days")
    kind: TaskKind | None = None
    granularity: Literal["day", "week"] = "day"


class StrategyQuery(Schema):
    status: StrategyStatus | None = None
    cursor: str | None = Field(None, description="next_cursor of a page")
    limit: int = Field(50, ge=1, le=100)


# --- responses ----------------------------------------------------------------------------------
class TaskBriefOut(Schema):
    id: int
    kind: str
    text: str


class TaskOut(TaskBriefOut):
    expected_answer: str
    workspace: str | None
    created_by: str | None
    created_at: datetime


class RunSummaryOut(Schema):
    id: int
    task: TaskBriefOut
    status: str
    outcome: str
    score: float | None
    created_by: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    step_count: int
    tokens_in: int
    tokens_out: int
    cost: float | None = Field(description="US dollars, its model calls at its model's price; null: unpriced")
    parent_id: int | None
    retry_of_id: int | None
    cancel_requested: bool


class RunListOut(Schema):
    data: list[RunSummaryOut]
    next_cursor: str | None
    previous_cursor: str | None


class AppliedStrategyOut(Schema):
    strategy_id: int
    version: int
    arm: str


class EvaluationOut(Schema):
    id: int
    round: int
    evaluator: str
    kind: str
    status: str
    score: float | None
    weight: float
    cost: float | None = Field(description="US dollars an LLM judge's call cost; null otherwise")
    accomplished: bool | None
    feedback: str
    details: dict[str, Any]
    corrected_answer: str
    author: str | None
    created_at: datetime


class RunOut(RunSummaryOut):
    task: TaskOut
    parent_step_id: int | None
    llm_backend: str
    model_name: str
    system_prompt: str
    plan: list[Any]
    tools_offered: list[Any]
    final_output: str
    error: str
    working_seconds: float | None = Field(description="From start to end (or now), less the waits for people")
    waited_seconds: float | None = Field(description="Time spent waiting for people to confirm tool calls")
    applied_strategies: list[AppliedStrategyOut]
    evaluations: list[EvaluationOut]


class AttemptOut(Schema):
    number: int
    started_at: datetime
    duration_ms: int | None
    error: str
    error_class: str
    retryable: bool


class StepOut(Schema):
    index: int
    turn: int
    kind: str
    thought: str
    tool_name: str
    tool_call_id: str
    arguments: Any
    result: Any
    error: str
    error_class: str
    error_signature: str
    success: bool | None
    cached: bool
    stale: bool
    served_by: str
    started_at: datetime | None
    finished_at: datetime | None
    duration_ms: int | None
    tokens_in: int
    tokens_out: int
    cost: float | None = Field(description="US dollars for the model call whose tokens it carries; null: unpriced")
    validation_status: str
    validation: Any
    attempts: list[AttemptOut]
    child_run_ids: list[int]


class StepPageOut(Schema):
    run_id: int
    run_status: str
    data: list[StepOut]
    next_after: int = Field(description="The index to pass as after= for the next page")
    has_more: bool


class ScoreOut(Schema):
    evaluation: EvaluationOut
    run: RunSummaryOut


class StrategyOut(Schema):
    id: int
    title: str
    status: str
    pattern_kind: str
    support: int
    confidence: float
    trial_fraction: float
    trial_started_at: datetime | None
    created_at: datetime
    updated_at: datetime
    version: int | None = Field(description="The current version's number")


class StrategyListOut(Schema):
    data: list[StrategyOut]
    next_cursor: str | None


class VersionOut(Schema):
    number: int
    title: str
    pattern: str
    old_behaviour: str
    new_guidance: str
    condition: dict[str, Any]
    guardrails: list[Any]
    worked_example: str
    author: str | None
    created_at: datetime


class EventOut(Schema):
    id: int
    action: str
    from_status: str
    to_status: str
    version: int | None
    actor: str | None
    reason: str
    created_at: datetime


class StrategyDetailOut(StrategyOut):
    evidence_summary: dict[str, Any]
    evidence_run_ids: list[int] = Field(description="The latest 50 runs it was mined from")
    versions: list[VersionOut] = Field(description="Newest first")
    events: list[EventOut] = Field(description="The audit log, newest first")
    trial: dict[str, Any] | None = Field(description="Its trial's statistics (both arms, interval, recommendation)")


class WorkspaceOut(Schema):
    id: int
    name: str
    description: str
    owner: str | None
    created_at: datetime


class TokenOut(Schema):
    name: str
    prefix: str
    scope: str
    created_at: datetime
    expires_at: datetime | None


class MeOut(Schema):
    username: str
    roles: list[str]
    permissions: list[str] = Field(description="What the account may do, as permission names")
    token: TokenOut


class ScoreFigures(Schema):
    runs: int
    scored: int
    avg_score: float | None
    succeeded: int
    accomplished: int
    unknown: int
    success_rate: float | None


class ErrorFigures(Schema):
    errors: int
    repeated: int
    runs_with_repeated: int
    runs: int
    repeated_rate: float | None
    repeated_per_run: float | None


class InterventionFigures(Schema):
    runs: int
    intervened: int
    confirmed: int
    human_scored: int
    retried: int
    cancelled: int
    rate: float | None


class StrategyFigures(Schema):
    finished: int
    improved: int
    ratio: float | None


class PeriodOut(Schema):
    period: date
    scores: ScoreFigures
    errors: ErrorFigures
    interventions: InterventionFigures


class ToolFigures(Schema):
    tool_name: str
    calls: int
    succeeded: int
    success_rate: float | None
    retries: int
    avg_ms: float | None
    p50_ms: float | None
    p95_ms: float | None


class DiskUserFigures(Schema):
    user: str
    uploads: int
    sandboxes: int
    total: int
    share: float | None = Field(description="Of the quota (above 1 when over it); null without a quota")


class DiskFigures(Schema):
    """Now, whatever the window: sizes in bytes, as recorded when the files were written."""

    workspaces_bytes: int
    workspaces: int
    upload_workspaces: int
    unmeasured_workspaces: int
    sandboxes_bytes: int = Field(description="Run sandboxes kept (a queued run's reserved at its workspace's size)")
    sandboxes_kept: int
    sandboxes_of_active_runs: int
    oldest_sandbox_run_id: int | None
    oldest_sandbox_ended_at: datetime | None
    retention_days: int = Field(description="RUN_SANDBOX_RETENTION_DAYS; 0: kept forever")
    next_cleanup_at: datetime | None
    quota_bytes: int = Field(description="Per person (DISK_QUOTA_MB); 0: no quota")
    nearest_quota: list[DiskUserFigures]


class MetricsOut(Schema):
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
