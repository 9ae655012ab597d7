"""The read queries behind the pages."""

import difflib
import functools
from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth.models import AbstractBaseUser
from django.db import connection
from django.db.models import (
    BooleanField,
    CharField,
    Count,
    Exists,
    ExpressionWrapper,
    F,
    Max,
    OuterRef,
    Prefetch,
    Q,
    QuerySet,
    StringAgg,
    Subquery,
    Value,
)
from django.db.models.functions import Cast, Coalesce, Concat
from django.shortcuts import get_object_or_404

from feedback.agent.prompts import build_system_prompt
from feedback.models import (
    AlertDelivery,
    AlertIncident,
    AlertRule,
    AppliedStrategy,
    Evaluation,
    EvaluationProfile,
    Run,
    Step,
    Strategy,
    Task,
    ToolConfirmation,
    Workspace,
)
from feedback.models.run import NO_SCORE
from feedback.strategies import injection


def runs_visible_to(user: AbstractBaseUser) -> QuerySet[Run]:
    """Operators and reviewers see every run; staff see the runs of their own tasks."""
    runs = Run.objects.all()
    if not user.has_perm("feedback.view_run"):
        runs = runs.filter(task__created_by=user)
    return runs


def run_visible_to(user: AbstractBaseUser, *, owner_id: int | None) -> bool:
    """``runs_visible_to``'s rule for one run whose task ``owner_id`` submitted."""
    return user.has_perm("feedback.view_run") or (owner_id is not None and owner_id == user.pk)


# --- a run's state: what its page and its parts show changes only with it -----------------------
# From the run's row: the final answer and the error come with the status, the tokens with the
# step count (written with each step), the model, prompt, tools and strategies before
# llm_backend (written as the run starts); the times make its clock and its waterfall.
RUN_STATE = (
    "status", "step_count", "cancel_requested", "score", "outcome", "plan", "llm_backend",
    "created_at", "started_at", "finished_at",
)  # fmt: skip


def _listed(rows: QuerySet, *, to: str) -> Subquery:
    """The ``rows`` of the outer run (through their field ``to``), each as "id:status", in id
    order, in one string: enough to tell when one is added or changes status (evaluations are
    written once; confirmations and sub-agent runs change by their status)."""
    item = Concat(Cast("id", CharField()), Value(":"), "status", output_field=CharField())
    # In id order where the database can be asked to (SQLite before 3.44 cannot): the same rows in
    # another order would only make a new ETag, never a stale page.
    order = {"order_by": "id"} if connection.features.supports_aggregate_order_by_clause else {}
    listed = rows.filter(**{to: OuterRef("pk")}).order_by().values(to)
    return Subquery(listed.annotate(listed=StringAgg(item, Value(","), **order)).values("listed"))


@functools.cache
def _run_states() -> QuerySet[Run]:
    """Every run's state, as ``run_state`` reads one of them. Built once a process, as a module's
    queryset is: a live page asks for its run's state every second, and building these
    subqueries cost 2.5 ms of the 4 ms each answer took (its SQL: half a millisecond)."""
    last_step = Step.objects.filter(run=OuterRef("pk")).order_by("-index").values("index")[:1]
    return Run.objects.values(
        *RUN_STATE,
        owner=F("task__created_by"),
        last_step=Subquery(last_step),
        evaluations_listed=_listed(Evaluation.objects.all(), to="run"),
        confirmations_listed=_listed(ToolConfirmation.objects.all(), to="run"),
        children_listed=_listed(Run.objects.all(), to="parent"),
    )


def run_state(run_id: int) -> dict | None:
    """What a run's page shows changes only when this does, in one query: its row's columns that
    show, the index of its last step (each step is written once), its evaluations, its
    confirmations and its sub-agent runs with their statuses, and who submitted it (for who may
    see it). None when there is no such run."""
    return next(iter(_run_states().filter(pk=run_id)[:1]), None)


def workspaces_usable_by(user: AbstractBaseUser) -> QuerySet[Workspace]:
    """The workspaces ``user`` may start a run from (the rule of services.workspace_can_use):
    the shared ones first, then their own uploads, then others' (for those who read every run),
    newest first."""
    workspaces = Workspace.objects.all()
    if not user.has_perm("feedback.view_run"):
        workspaces = workspaces.filter(Q(owner=None) | Q(owner=user.pk))
    shared = ExpressionWrapper(Q(owner=None), output_field=BooleanField())
    own = ExpressionWrapper(Q(owner=user.pk), output_field=BooleanField())
    return workspaces.select_related("owner").order_by(shared.desc(), own.desc(), "-created_at", "name")


def run_list(user: AbstractBaseUser, *, status: str = "", kind: str = "") -> QuerySet[Run]:
    runs = runs_visible_to(user).select_related("task", "task__created_by").order_by("-created_at", "-id")
    if status:
        runs = runs.filter(status=status)
    if kind:
        runs = runs.filter(task_kind=kind)
    return runs


# What a row of the run list shows (templates/feedback/run_list.html#run-row): a page of fifty
# runs need not read their prompts, answers, plans and submitters.
RUN_ROW_COLUMNS = ("task__text", "task_kind", "status", "outcome", "step_count", "score", "created_at")


def run_rows(user: AbstractBaseUser) -> QuerySet[Run]:
    """``run_list`` with only the columns its rows show."""
    return run_list(user).select_related(None).select_related("task").only(*RUN_ROW_COLUMNS)


# --- the run list: filters, search, keyset pages ---------------------------------------------
# Sort name -> (the ordering key, newest/highest first?). Every order ends on id so the keyset
# cursor (value, id) names exactly one row even when values repeat.
RUN_SORTS = {"newest": ("created_at", True), "oldest": ("created_at", False), "score": ("sort_score", True)}


@dataclass
class RunPage:
    runs: list[Run]
    # The cursors of the pages after and before this one, "" where there is none.
    next_cursor: str
    previous_cursor: str = ""


def search_runs(runs: QuerySet[Run], text: str) -> QuerySet[Run]:
    """Full-text search over the task text: PostgreSQL's text search (served by the GIN index
    of migration 0005) where we have it, a plain icontains on SQLite."""
    if connection.vendor != "postgresql":
        return runs.filter(task__text__icontains=text)
    from django.contrib.postgres.search import SearchQuery, SearchVector

    # The expression must be the one the index was built on, or PostgreSQL will not use it.
    query = SearchQuery(text, config=SEARCH_CONFIG, search_type="websearch")
    # A rare word first, by the index: PostgreSQL guesses a word it keeps no statistics for to
    # match 0.5% of tasks, so for "newest first, 50 a page" it walks the runs by date testing each
    # one's task, and a word of one task in a million meant 36 s of that walk. The tasks a rare
    # word matches are few: they are found by the index, and their runs by their task.
    tasks = Task.objects.annotate(search=SearchVector("text", config=SEARCH_CONFIG)).filter(search=query)
    few = list(tasks.values_list("id", flat=True)[:SEARCH_FEW_TASKS])
    if len(few) < SEARCH_FEW_TASKS:
        return runs.filter(task_id__in=few)
    # A common word: the walk by date meets a match every few runs.
    return runs.annotate(search=SearchVector("task__text", config=SEARCH_CONFIG)).filter(search=query)


SEARCH_CONFIG = "english"
# Up to this many matching tasks, the search goes by their ids (see search_runs).
SEARCH_FEW_TASKS = 1000


def filter_runs(runs: QuerySet[Run], filters: dict) -> QuerySet[Run]:
    """Apply the run list's filters (cleaned values of RunFilterForm; empty ones are skipped)."""
    if filters.get("status"):
        runs = runs.filter(status=filters["status"])
    if filters.get("kind"):
        runs = runs.filter(task_kind=filters["kind"])
    if filters.get("outcome"):
        runs = runs.filter(outcome=filters["outcome"])
    if filters.get("score_min") is not None:
        runs = runs.filter(score__gte=filters["score_min"])
    if filters.get("score_max") is not None:
        runs = runs.filter(score__lte=filters["score_max"])
    if filters.get("since"):
        runs = runs.filter(created_at__date__gte=filters["since"])
    if filters.get("until"):
        runs = runs.filter(created_at__date__lte=filters["until"])
    # EXISTS rather than joins: a run with many matching steps must still appear once.
    if filters.get("tool"):
        runs = runs.filter(Exists(Step.objects.filter(run=OuterRef("pk"), tool_name=filters["tool"])))
    if filters.get("error"):
        runs = runs.filter(
            Exists(Step.objects.filter(run=OuterRef("pk"), error_signature__startswith=filters["error"]))
        )
    if filters.get("strategy"):
        runs = runs.filter(
            Exists(
                AppliedStrategy.objects.filter(
                    run=OuterRef("pk"), strategy_version__strategy=filters["strategy"]
                ).exclude(arm=AppliedStrategy.Arm.CONTROL)
            )
        )
    if filters.get("q"):
        runs = search_runs(runs, filters["q"])
    return runs


def _cursor_value(run: Run, field: str) -> str:
    value = getattr(run, field)
    return value.isoformat() if hasattr(value, "isoformat") else repr(float(value))


def run_cursor(run: Run, field: str = "created_at") -> str:
    """The keyset position of ``run`` in a list sorted by ``field`` (then id)."""
    return f"{_cursor_value(run, field)}_{run.pk}"


# Before every run: what the newest-first list's first page compares with when it is empty.
BEFORE_ALL_RUNS = "0001-01-01T00:00:00+00:00_0"


def _parse_cursor(cursor: str, field: str) -> tuple[object, int] | None:
    value, _, pk = cursor.rpartition("_")
    try:
        parsed = datetime.fromisoformat(value) if field == "created_at" else float(value)
        return parsed, int(pk)
    except ValueError:
        return None  # a mangled cursor shows the first page rather than an error


# The run list says "N new runs" up to this many; beyond, "N+ new runs".
NEWER_RUNS_SHOWN = 99


def newer_runs(runs: QuerySet[Run], *, than: str) -> int:
    """How many of ``runs`` are newer than the row whose newest-first cursor is ``than`` (up to
    NEWER_RUNS_SHOWN + 1: the same index range scan as a page, never a full count)."""
    position = _parse_cursor(than, "created_at")
    if position is None:
        return 0
    value, pk = position
    newer = runs.filter(Q(created_at__gt=value) | Q(created_at=value, id__gt=pk))
    return len(newer.order_by().values_list("id", flat=True)[: NEWER_RUNS_SHOWN + 1])


def run_page(
    runs: QuerySet[Run], *, sort: str = "newest", cursor: str = "", before: str = "", size: int = 50
) -> RunPage:
    """One page of the run list by keyset on (sort value, id): each page costs the same however
    deep it is, unlike OFFSET, which reads and throws away every row before it. ``cursor``: the
    page after that row; ``before``: the page before that row (read backwards, then turned)."""
    field, descending = RUN_SORTS.get(sort, RUN_SORTS["newest"])
    runs = runs.annotate(sort_score=Coalesce("score", Value(NO_SCORE))) if field == "sort_score" else runs
    position = _parse_cursor(cursor or before, field) if (cursor or before) else None
    backwards = position is not None and not cursor
    # Reading backwards is reading forwards in the opposite order.
    forward = descending != backwards
    prefix = "-" if forward else ""
    ordered = runs.order_by(f"{prefix}{field}", f"{prefix}id")
    if position:
        value, pk = position
        op = "lt" if forward else "gt"
        # Two range scans, each bounded by the index on both columns: the rest of the cursor's
        # tie group (its value, the ids beyond it), then the values beyond. As one condition (an
        # OR) PostgreSQL bounds its scan by the value alone and walks the whole tie group: sorted
        # by score, the unscored runs share one value (90 ms a deep page at 1,000,000 runs).
        rows = list(ordered.filter(**{field: value, f"id__{op}": pk})[: size + 1])
        if len(rows) <= size:
            rows += ordered.filter(**{f"{field}__{op}": value})[: size + 1 - len(rows)]
    else:
        rows = list(ordered[: size + 1])
    more = len(rows) > size
    rows = rows[:size]
    if backwards:
        rows.reverse()

    def key(run: Run) -> str:
        return run_cursor(run, field)

    # Read backwards, we came from the page after this one; read forwards from a cursor, from
    # the page before.
    later = (more and not backwards) or (backwards and bool(rows))
    earlier = (more and backwards) or (position is not None and not backwards and bool(rows))
    return RunPage(
        runs=rows,
        next_cursor=key(rows[-1]) if later else "",
        previous_cursor=key(rows[0]) if earlier else "",
    )


def run_applied_strategies(run: Run) -> QuerySet[AppliedStrategy]:
    return run.applied_strategies.select_related("strategy_version__strategy").order_by("id")


def strategy_list(*, status: str = "") -> QuerySet[Strategy]:
    strategies = Strategy.objects.select_related("current_version").order_by("-updated_at")
    if status:
        strategies = strategies.filter(status=status)
    return strategies


# --- evaluation -----------------------------------------------------------------------------
# Judge and rule scores further apart than this mean the evaluators disagree: a person decides.
DISAGREEMENT = 0.5
LOW_SCORE = 0.5


def _latest_score(kind: str) -> Subquery:
    return Subquery(
        Evaluation.objects.filter(run=OuterRef("pk"), kind=kind, status=Evaluation.Status.OK)
        .order_by("-round", "-id")
        .values("score")[:1]
    )


def review_queue() -> QuerySet[Run]:
    """Ended runs no person has scored yet that need one, newest first: the task not
    accomplished (whatever the score: an answer that gives up can score high), a composite score
    below the profile's ``review_below``, the judge and the rule evaluator disagreeing by more
    than ``DISAGREEMENT``, or an evaluator that failed in the latest round. Each run carries the
    flags that put it there."""
    latest_round = Subquery(
        Evaluation.objects.filter(run=OuterRef("pk"))
        .exclude(kind=Evaluation.Kind.HUMAN)
        .order_by("-round")
        .values("round")[:1]
    )
    runs = (
        Run.objects.exclude(status__in=Run.ACTIVE_STATUSES)
        .exclude(evaluations__kind=Evaluation.Kind.HUMAN)
        .annotate(
            judge_score=_latest_score(Evaluation.Kind.JUDGE),
            rule_score=_latest_score(Evaluation.Kind.RULE),
            latest_round=latest_round,
            # The kind's profile may set its own threshold; kinds without a profile use LOW_SCORE.
            review_below=Coalesce(
                Subquery(EvaluationProfile.objects.filter(task_kind=OuterRef("task_kind")).values("review_below")[:1]),
                Value(LOW_SCORE),
            ),
        )
        .annotate(
            evaluator_failed=Exists(
                Evaluation.objects.filter(
                    run=OuterRef("pk"), round=OuterRef("latest_round"), status=Evaluation.Status.FAILED
                )
            ),
            not_accomplished=ExpressionWrapper(Q(outcome=Run.Outcome.NOT_ACCOMPLISHED), output_field=BooleanField()),
            low_score=ExpressionWrapper(Q(score__lt=F("review_below")), output_field=BooleanField()),
            disagreement=ExpressionWrapper(
                Q(judge_score__gt=F("rule_score") + DISAGREEMENT) | Q(rule_score__gt=F("judge_score") + DISAGREEMENT),
                output_field=BooleanField(),
            ),
        )
    )
    return (
        runs.filter(Q(not_accomplished=True) | Q(low_score=True) | Q(disagreement=True) | Q(evaluator_failed=True))
        .select_related("task")
        .order_by("-created_at", "-id")
    )


def run_evaluations(run: Run) -> QuerySet[Evaluation]:
    """Every evaluation of the run, newest round first: the history the run page shows."""
    return run.evaluations.select_related("author").order_by("-round", "kind", "id")


# --- strategies -------------------------------------------------------------------------------
def strategy_prompt_diff(strategy: Strategy) -> dict:
    """The exact system prompt of a sample matching task, without and with the strategy."""

    version = strategy.current_version
    sample = strategy.evidence.select_related("task").order_by("-pk").first()
    if version is None or sample is None:
        return {"sample": None, "lines": []}
    others = injection.select(sample, exclude=strategy.pk)
    before = build_system_prompt(others.guidance, others.examples)
    examples = others.examples + ([version.worked_example] if version.worked_example else [])
    after = build_system_prompt([*others.guidance, version.new_guidance], examples)
    lines = []
    for line in difflib.unified_diff(before.splitlines(), after.splitlines(), "before", "after", n=2, lineterm=""):
        if line.startswith(("---", "+++")):
            continue
        kind = (
            "add" if line.startswith("+") else "del" if line.startswith("-") else "hunk" if line.startswith("@") else ""
        )
        lines.append({"kind": kind, "text": line})
    return {"sample": sample, "before": before, "after": after, "lines": lines}


def strategy_detail(strategy_id: int) -> Strategy:

    return get_object_or_404(
        Strategy.objects.select_related("current_version", "current_version__author"), pk=strategy_id
    )


def alert_incidents(*, state: str = "", rule: AlertRule | None = None) -> QuerySet[AlertIncident]:
    """The alert history, newest first, each incident with its deliveries and their attempts."""
    incidents = AlertIncident.objects.select_related("rule").prefetch_related(
        Prefetch("deliveries", queryset=AlertDelivery.objects.prefetch_related("attempt_rows").order_by("id"))
    )
    if state:
        incidents = incidents.filter(state=state)
    if rule is not None:
        incidents = incidents.filter(rule=rule)
    return incidents.order_by("-opened_at", "-id")


def alert_rules() -> QuerySet[AlertRule]:
    """Every rule with its open incidents and when it last opened one."""
    return AlertRule.objects.annotate(
        open_incidents=Count("incidents", filter=Q(incidents__state=AlertIncident.State.OPEN)),
        last_opened_at=Max("incidents__opened_at"),
    ).order_by("name", "id")
