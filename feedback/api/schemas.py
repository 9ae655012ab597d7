"""What the API reads, as pydantic models: they give the OpenAPI document its request shapes and
refuse a body of the wrong shape (a wrong type, an unknown field) before anything runs. The rules
of the domain (a task's length, a usable workspace, a text file, a reason for a decision) are the
site's forms', applied by the endpoints, so the API and the pages accept exactly the same things
(with the forms' translated messages); each of those rules is also stated here, in the document's
terms (``minLength``, ``pattern``, ``enum``, ``if``/``then``), so a client generated from the
document does not send what the forms refuse (tests/test_api_schema_limits.py holds the two
together). What it answers is outputs.py's."""

from typing import Annotated, Literal

from ninja import Schema
from pydantic import ConfigDict, Field, Strict

from feedback.agent.tools import BUILTIN_TOOLS
from feedback.forms import ERROR_SIGNATURE, SAFE_NAME, UPLOAD_EXTENSIONS, UPLOAD_MAX_BYTES, UPLOAD_MAX_FILES
from feedback.models import Run, Strategy, Task

# JSON text as it is: a number or a list is not a string here (pydantic would not convert them
# anyway, but says so plainly in strict mode).
Text = Annotated[str, Strict()]
Integer = Annotated[int, Strict()]

ISO_DATE = r"^\d{4}-\d{2}-\d{2}$"

# The forms' rules as patterns (documented, not enforced here: the forms enforce them with their
# own messages). Django's text fields refuse NUL and strip surrounding whitespace before checking.
NO_NUL = r"^[^\x00]*$"
NOT_BLANK = r"^[^\x00]*[^\s\x00][^\x00]*$"  # a reason: something besides whitespace
TASK_TEXT = r"^\s*[^\s\x00][^\x00]{3,}[^\s\x00]\s*$"  # at least 5 characters once stripped
FILE_CONTENT = r"^[^\x00]+$"  # a text file, not empty
# A plain name with an allowed extension, in any case (JSON Schema patterns have no flags).
FILE_NAME = (
    rf"(?={SAFE_NAME.pattern})^.*\.("
    + "|".join("".join(f"[{c.lower()}{c.upper()}]" for c in ext.lstrip(".")) for ext in UPLOAD_EXTENSIONS)
    + ")$"
)


def states(**rules) -> dict:
    """The JSON Schema keywords stating a rule the forms enforce, for ``json_schema_extra``."""
    return {"json_schema_extra": rules}


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
    name: Text = Field(
        pattern=SAFE_NAME.pattern,
        description="A plain file name: .txt .md .csv .json .log",
        **states(pattern=FILE_NAME),  # the extension too, which the form checks
    )
    content: Text = Field(
        max_length=UPLOAD_MAX_BYTES,
        description="The file's text (UTF-8, at most 1 MB, not empty, no NUL)",
        **states(minLength=1, pattern=FILE_CONTENT),
    )


class TaskIn(Body):
    kind: TaskKind = Task.Kind.GENERAL.value
    text: Text = Field(
        max_length=Task.TEXT_MAX_LENGTH,
        description="The task, at least 5 characters besides surrounding whitespace",
        **states(minLength=5, pattern=TASK_TEXT),
    )
    expected_answer: Text = Field("", max_length=Task.TEXT_MAX_LENGTH, **states(pattern=NO_NUL))
    workspace_id: Integer | None = Field(None, description="A workspace from GET /workspaces; none: an empty one")
    files: list[FileIn] = Field(
        default_factory=list, max_length=UPLOAD_MAX_FILES, description="Text files added to a copy of the workspace"
    )


class ScoreIn(Body):
    score: Annotated[float, Strict()] = Field(ge=0, le=1)
    comment: Text = Field("", max_length=4000, **states(pattern=NO_NUL))
    corrected_answer: Text = Field("", max_length=Task.TEXT_MAX_LENGTH, **states(pattern=NO_NUL))
    outcome: Literal["accomplished", "not_accomplished", ""] = Field(
        "", description='Your verdict on the task; "" leaves it to the evaluators'
    )
    scores: dict[Annotated[str, Field(max_length=100)], Annotated[bool, Strict()] | float | Text] = Field(
        default_factory=dict,
        max_length=50,
        description=(
            "Values of the score configurations (GET /score-configs), by name: a number within a numeric one's "
            "range, one of a categorical one's categories, true or false for a boolean one"
        ),
    )


class DecisionIn(Body):
    action: Literal["approve", "reject", "promote", "promote_override", "roll_back"]
    reason: Text = Field(
        max_length=2000,
        description="Why: every decision needs one (it goes into the audit log); whitespace alone is none",
        **states(minLength=1, pattern=NOT_BLANK),
    )
    trial_fraction: Annotated[float, Strict()] | None = Field(
        None, ge=0.05, le=0.95, description="On approve: the share of matching runs given the strategy"
    )


class RunQuery(Schema):
    """The run list's filters, as the run list page has them."""

    q: str | None = Field(
        None, max_length=200, description="Full-text search over the task text", **states(pattern=NO_NUL)
    )
    status: RunStatus | None = None
    outcome: RunOutcome | None = None
    kind: TaskKind | None = None
    score_min: float | None = Field(None, ge=0, le=1)
    score_max: float | None = Field(None, ge=0, le=1)
    tool: str | None = Field(None, description="Runs that called this tool", **states(enum=sorted(BUILTIN_TOOLS)))
    error: str | None = Field(
        None,
        description="Runs with an error signature starting with these 4-40 hex digits",
        **states(pattern=ERROR_SIGNATURE, minLength=4, maxLength=40),
    )
    strategy: int | None = Field(
        None, description="Runs a strategy was applied to (not its trial's control arm)", **states(minimum=1)
    )
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
