"""The run list: its rows, filters, search, keyset pages and the count of newer runs."""

import re
from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth.models import AbstractBaseUser
from django.db import connection
from django.db.models import Exists, OuterRef, QuerySet, Value
from django.db.models.expressions import RawSQL
from django.db.models.functions import Coalesce

from feedback.models import AppliedStrategy, Run, Step, Task
from feedback.models.run import NO_SCORE

from .runs import runs_visible_to


def run_list(user: AbstractBaseUser, *, status: str = "", kind: str = "") -> QuerySet[Run]:
    runs = runs_visible_to(user).select_related("task", "task__created_by").order_by("-created_at", "-id")
    if status:
        runs = runs.filter(status=status)
    if kind:
        runs = runs.filter(task_kind=kind)
    return runs


# What a row of the run list shows (templates/feedback/run_list.html#run-row): a page of fifty
# runs need not read their prompts, answers, plans and submitters.
RUN_ROW_COLUMNS = ("task__text", "task_kind", "status", "outcome", "step_count", "score", "created_at", "purpose")


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
    """Full-text search over the task text, the same words either way: PostgreSQL's text search
    (served by the GIN index of migration 0005), or SQLite's FTS5 index (migration 0034)."""
    if connection.vendor == "sqlite":
        query = fts5_query(text)
        if not query:
            return runs.none()
        return runs.filter(task_id__in=RawSQL(_FTS5_TASKS, [query]))
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
_FTS5_TASKS = "SELECT rowid FROM feedback_task_fts WHERE feedback_task_fts MATCH %s"
_FTS5_TERM = re.compile(r'(-?)"([^"]*)"|(-?)(\w+)')


def fts5_query(text: str) -> str:
    """What a person typed as an FTS5 query meaning what PostgreSQL's ``websearch`` reads: every
    word (or "quoted phrase") must be there, a leading ``-`` excludes one. Each term goes in
    double quotes, so nothing typed is read as FTS5 syntax (``NEAR``, ``*``, ``:``, a stray quote)."""
    wanted, unwanted = [], []
    for minus, phrase, minus_word, word in _FTS5_TERM.findall(text):
        words = re.findall(r"\w+", phrase) if phrase else [word]
        if words:
            (unwanted if (minus or minus_word) else wanted).append('"' + " ".join(words) + '"')
    if not wanted:
        return ""
    return " ".join(wanted) + "".join(f" NOT {term}" for term in unwanted)


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
                    AppliedStrategy.APPLIED, run=OuterRef("pk"), strategy_version__strategy=filters["strategy"]
                )
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


def _parse_cursor(cursor: str, field: str) -> tuple[object, int] | None:
    value, _, pk = cursor.rpartition("_")
    try:
        parsed = datetime.fromisoformat(value) if field == "created_at" else float(value)
        return parsed, int(pk)
    except ValueError:
        return None  # a mangled cursor shows the first page rather than an error


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
