"""What the API answers, as django-ninja output schemas: endpoints return the rows themselves (runs,
evaluations, strategies...) and these read them, by attribute (``from_attributes``), by path
(``AliasPath``) or by a ``resolve_<field>`` where a value is computed. They also give the OpenAPI
document its answer shapes. Every field is always sent, so the document marks every one required.

A new endpoint's answer is a class here (or in a module of its area) naming the row's fields it
shows: no dict is built by hand between a row and its JSON."""

from datetime import datetime
from typing import Annotated, Any

from django.contrib.auth.models import AbstractBaseUser
from django.utils import timezone
from ninja import Schema
from pydantic import AliasChoices, AliasPath, BeforeValidator, ConfigDict, Field

from feedback import selectors, traces
from feedback.models import Evaluation, Run, Strategy
from feedback.strategies.trials import trial_stats

# How many of the runs a strategy was mined from its answer lists.
EVIDENCE_SHOWN = 50


def _username(value: Any) -> Any:
    return value.get_username() if isinstance(value, AbstractBaseUser) else value


# A person as the API names them: their username (null: nobody, or an account since deleted).
UserName = Annotated[str | None, BeforeValidator(_username)]


# Every field of an answer is always sent: the document marks every one required.
class Out(Schema):
    model_config = ConfigDict(json_schema_serialization_defaults_required=True)


def path_field(*path: str | int, **field: Any) -> Any:
    """A field read along ``path`` (a relation's column, a nested figure)."""
    return Field(validation_alias=AliasPath(*path), **field)


def nullable_path_field(*path: str | int, **field: Any) -> Any:
    """A field read along ``path``, null where the path leads nowhere (a relation that is null)."""
    return Field(None, validation_alias=AliasPath(*path), **field)


# --- runs ---------------------------------------------------------------------------------------
class TaskBriefOut(Out):
    id: int
    kind: str
    text: str


class TaskOut(TaskBriefOut):
    expected_answer: str
    workspace: str | None = nullable_path_field("workspace", "name")
    created_by: UserName
    created_at: datetime


class RunSummaryOut(Out):
    id: int
    task: TaskBriefOut
    status: str
    outcome: str
    score: float | None
    # The task's author; an answer replayed from its stored JSON (Idempotency-Key) has it by name.
    created_by: UserName = Field(validation_alias=AliasChoices("created_by", AliasPath("task", "created_by")))
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


class RunListOut(Out):
    data: list[RunSummaryOut]
    next_cursor: str | None
    previous_cursor: str | None


class AppliedStrategyOut(Out):
    strategy_id: int = path_field("strategy_version", "strategy_id")
    version: int = path_field("strategy_version", "number")
    arm: str


class ScoreValueOut(Out):
    name: str = path_field("config", "name")
    data_type: str = path_field("config", "data_type")
    value: bool | float | str = Field(description="A number, a category's label, or true / false")


class ScoreConfigOut(Out):
    id: int
    name: str
    description: str
    data_type: str
    min_value: float | None
    max_value: float | None
    categories: list[str]
    required: bool
    archived: bool


class EvaluationOut(Out):
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
    author: UserName
    created_at: datetime
    scores: list[ScoreValueOut] = Field(description="A reviewer's values of the score configurations")

    @staticmethod
    def resolve_details(row: Evaluation) -> dict:
        return row.details or {}

    @staticmethod
    def resolve_scores(row: Evaluation) -> list:
        # Only a reviewer's evaluation has score values (selectors.run_evaluations reads those).
        return list(row.score_values.all()) if row.kind == Evaluation.Kind.HUMAN else []


def _working_and_waited(run: Run) -> tuple[float | None, float | None]:
    """As the run page counts them; read once for both fields."""
    if run.started_at is None:
        return None, None
    if not hasattr(run, "_working_and_waited"):
        waits = traces.run_waits(run.pk)
        end = run.finished_at or timezone.now()
        run._working_and_waited = traces.working_and_waited_seconds(started_at=run.started_at, end=end, waits=waits)
    return run._working_and_waited


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

    @staticmethod
    def resolve_working_seconds(run: Run) -> float | None:
        return _working_and_waited(run)[0]

    @staticmethod
    def resolve_waited_seconds(run: Run) -> float | None:
        return _working_and_waited(run)[1]

    @staticmethod
    def resolve_applied_strategies(run: Run) -> list:
        return list(selectors.run_applied_strategies(run))

    @staticmethod
    def resolve_evaluations(run: Run) -> list[Evaluation]:
        return selectors.run_evaluations(run)


# A step is given as the trace's JSON download gives it (traces.step_as_dict), one shape for both.
class AttemptOut(Out):
    number: int
    started_at: datetime
    duration_ms: int | None
    error: str
    error_class: str
    retryable: bool


class StepOut(Out):
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


class StepPageOut(Out):
    run_id: int
    run_status: str
    data: list[StepOut]
    next_after: int = Field(description="The index to pass as after= for the next page")
    has_more: bool


class ScoreOut(Out):
    evaluation: EvaluationOut
    run: RunSummaryOut


# --- strategies ---------------------------------------------------------------------------------
class StrategyOut(Out):
    id: int
    title: str
    status: str
    pattern_kind: str
    support: int
    confidence: float | None = Field(description="The failure lift (rate with the pattern minus without); null: none")
    trial_fraction: float
    trial_started_at: datetime | None
    promoted_at: datetime | None = Field(description="When it became active (its watch starts there)")
    promoted_by_override: bool = Field(description="Promoted against its verdict, by a reviewer's explicit override")
    created_at: datetime
    updated_at: datetime
    version: int | None = nullable_path_field("current_version", "number", description="The current version's number")


class StrategyListOut(Out):
    data: list[StrategyOut]
    next_cursor: str | None


class VersionOut(Out):
    number: int
    title: str
    pattern: str
    old_behaviour: str
    new_guidance: str
    condition: dict[str, Any]
    guardrails: list[Any]
    worked_example: str
    insights: list[Any] = Field(description="An insight list's insights ({id, text, votes}), best voted first")
    author: UserName
    created_at: datetime


class EventOut(Out):
    id: int
    action: str
    from_status: str
    to_status: str
    version: int | None = nullable_path_field("version", "number")
    actor: UserName
    reason: str
    created_at: datetime


class StrategyDetailOut(StrategyOut):
    """What the strategy's review page shows: every version, the audit log, the trial."""

    evidence_summary: dict[str, Any]
    evidence_run_ids: list[int] = Field(description="The latest 50 runs it was mined from")
    versions: list[VersionOut] = Field(description="Newest first")
    events: list[EventOut] = Field(description="The audit log, newest first")
    trial: dict[str, Any] | None = Field(description="Its trial's statistics (both arms, interval, recommendation)")

    @staticmethod
    def resolve_evidence_summary(strategy: Strategy) -> dict:
        return strategy.evidence_summary or {}

    @staticmethod
    def resolve_evidence_run_ids(strategy: Strategy) -> list[int]:
        return list(strategy.evidence.order_by("-pk").values_list("pk", flat=True)[:EVIDENCE_SHOWN])

    @staticmethod
    def resolve_versions(strategy: Strategy) -> list:
        return list(strategy.versions.select_related("author").order_by("-number"))

    @staticmethod
    def resolve_events(strategy: Strategy) -> list:
        return list(strategy.events.select_related("actor", "version").order_by("-created_at", "-id"))

    @staticmethod
    def resolve_trial(strategy: Strategy) -> dict | None:
        return trial_stats(strategy).as_json() if strategy.trial_started_at else None


# --- workspaces, the caller ---------------------------------------------------------------------
class WorkspaceOut(Out):
    id: int
    name: str
    description: str
    owner: UserName
    created_at: datetime


class TokenOut(Out):
    name: str
    prefix: str
    scope: str
    created_at: datetime
    expires_at: datetime | None


class MeOut(Out):
    username: str
    roles: list[str]
    permissions: list[str] = Field(description="What the account may do, as permission names")
    token: TokenOut
