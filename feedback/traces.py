"""The read queries behind a run's trace: its pages of steps, their places on the waterfall, the
steps that went wrong, and the run and its steps as the JSON download gives them."""

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlencode

from django.db.models import Prefetch, Q, QuerySet, prefetch_related_objects
from django.utils import timezone

from feedback.models import Run, Step, ToolConfirmation
from feedback.models.step import STEP_WENT_WRONG
from feedback.selectors import run_applied_strategies

# The first response of a run page renders this many steps; further pages load on scroll. Fifty
# fill several screens, and each costs about 0.3 ms to render (make bench: a 10,000-step run's
# page took 42 ms at p50 with 100).
TRACE_PAGE_SIZE = 50
# Search within a trace: at most this many words (each must match), each at most this long.
SEARCH_WORDS = 6
SEARCH_CHARS = 200


@dataclass(frozen=True)
class TraceFilter:
    """What the reader narrowed the trace to: only the steps that went wrong, and/or the steps
    whose text (tool, thought, arguments, result, error) holds every word of ``query``. It lives
    in the URL (``?problems=1&q=...``), so a filtered trace can be shared and paged."""

    wrong_only: bool = False
    query: str = ""

    def __bool__(self) -> bool:
        return self.wrong_only or bool(self.query)

    @property
    def words(self) -> list[str]:
        return self.query.split()[:SEARCH_WORDS]

    def as_query(self) -> str:
        """The filter as URL parameters (empty when there is none), for the loader's links."""
        params = {"problems": "1"} if self.wrong_only else {}
        if self.query:
            params["q"] = self.query
        return urlencode(params)


def trace_filter(params: Mapping[str, str]) -> TraceFilter:
    """The filter a request's GET parameters ask for; anything else in them is ignored."""
    # A NUL (``%00`` in a URL) is no text PostgreSQL can compare with: dropped, as are the
    # spaces around and between the words.
    query = str(params.get("q", "")).replace("\x00", "")
    return TraceFilter(
        wrong_only=params.get("problems", "") in ("1", "on", "true"),
        query=" ".join(query.split())[:SEARCH_CHARS],
    )


def _matching(steps: QuerySet[Step], matching: TraceFilter | None) -> QuerySet[Step]:
    """The steps the filter keeps. One WHERE on the run's steps, read in index order from the
    (run, index) index and stopped at a page's worth: paging a filtered trace stays keyset."""
    if not matching:
        return steps
    if matching.wrong_only:
        steps = steps.filter(STEP_WENT_WRONG)
    for word in matching.words:
        # JSONField's icontains reads the JSON as text (on PostgreSQL and SQLite alike).
        steps = steps.filter(
            Q(tool_name__icontains=word)
            | Q(thought__icontains=word)
            | Q(error__icontains=word)
            | Q(error_class__icontains=word)
            | Q(arguments__icontains=word)
            | Q(result__icontains=word)
        )
    return steps


@dataclass
class TracePage:
    steps: list[Step]
    # The index to ask for next (``?after=``): the last one shown, or -1 before the first step.
    last_index: int
    has_more: bool
    # Every step of the run is in this page (its first, unfiltered, with nothing after).
    whole: bool = False


def trace_page(
    run: Run,
    *,
    after: int = -1,
    limit: int = TRACE_PAGE_SIZE,
    matching: TraceFilter | None = None,
    origin: datetime | None = None,
) -> TracePage:
    """One page of a run's steps (those ``matching`` keeps, when given), keyset by step index (an
    OFFSET would rescan thousands of rows per page), placed on the waterfall from ``origin`` (the
    run's own start by default; a sub-agent run's, its top-level run's). Each step carries its
    attempts and the sub-agent runs it started: one query each for the steps that can have any
    (retried or gone wrong; delegations), none when no step can."""
    rows = list(_matching(run.steps.filter(index__gt=after), matching).order_by("index")[: limit + 1])
    has_more = len(rows) > limit
    rows = rows[:limit]
    prefetch_related_objects([step for step in rows if step.keeps_attempts], "attempt_rows")
    children = Prefetch("child_runs", queryset=Run.objects.select_related("task").order_by("id"))
    prefetch_related_objects([step for step in rows if step.starts_runs], children)
    _place_on_waterfall(origin or run.started_at or run.created_at, rows)
    whole = after < 0 and not matching and not has_more
    return TracePage(steps=rows, last_index=rows[-1].index if rows else after, has_more=has_more, whole=whole)


def _place_on_waterfall(start: datetime, steps: list[Step]) -> None:
    """Give each step ``bar_at`` (when it started) and ``bar_ms`` (how long it took), in whole
    milliseconds from ``start``. They never change once the step is written, so neither
    does the step's HTML; the CSS lays the bars out against the trace's ``--span``
    (``trace_span_ms``), the one value that moves while the run goes on."""
    for step in steps:
        step.bar_at = max(0, int((step.started_at - start).total_seconds() * 1000)) if step.started_at else 0
        step.bar_ms = max(0, step.duration_ms or 0)


@dataclass
class TreePlace:
    """Where a run sits in its tree of sub-agent runs: how deep (0 for a top-level run, 1 for its
    child...) and its top-level run, whose time axis the whole tree's steps are drawn on."""

    depth: int
    root: Run


def run_tree_place(run: Run, *, limit: int = 20) -> TreePlace:
    """One query per level (a tree is a few levels deep), bounded against a cycle a bad row
    could make."""
    depth, root = 0, run
    while root.parent_id is not None and depth < limit:
        parent = Run.objects.filter(pk=root.parent_id).only("parent_id", "created_at", "started_at", "finished_at")
        root = parent.first() or root
        depth += 1
    return TreePlace(depth=depth, root=root)


def trace_span_ms(*, started_at: datetime | None, created_at: datetime, finished_at: datetime | None) -> int:
    """The waterfall's scale: the run's span in milliseconds so far (at least 1), from its start
    (or creation, before it started) to its end, or to now while it has not ended."""
    end = finished_at or timezone.now()
    return max(1, math.ceil((end - (started_at or created_at)).total_seconds() * 1000))


# A wait for a person: a confirmation's (requested_at, decided_at), decided_at None while pending.
Wait = tuple[datetime, datetime | None]


def run_waits(run_id: int) -> list[Wait]:
    """When the run waited for people: each of its tool confirmations, requested to decided."""
    return list(ToolConfirmation.objects.filter(run_id=run_id).values_list("requested_at", "decided_at"))


def working_and_waited_seconds(*, started_at: datetime, end: datetime, waits: list[Wait]) -> tuple[float, float]:
    """A run's time from ``started_at`` to ``end`` split into working time and time waited for
    people (the waits' union: the calls of one turn wait together). A wait still pending lasts
    until ``end``, so while a run awaits a confirmation its working time stands still."""
    spans = sorted((max(asked, started_at), min(decided or end, end)) for asked, decided in waits)
    waited, until = 0.0, started_at
    for begin, finish in spans:
        begin = max(begin, until)
        if finish > begin:  # a decision stamped before its request (clocks apart) counts nothing
            waited += (finish - begin).total_seconds()
            until = finish
    total = max(0.0, (end - started_at).total_seconds())
    return max(0.0, total - waited), waited


def trace_problems(run: Run, *, limit: int = 20, page: TracePage | None = None) -> list[Step]:
    """The steps that went wrong (failed calls, failed validation, model errors), for the
    "jump to" list at the top of the trace: read from ``page`` when it holds the whole trace (most
    runs), else found by query, not by loading every step."""
    if page is not None and page.whole:
        return [step for step in page.steps if step.went_wrong][:limit]
    # "run" too: the related manager sets each step's run from its run_id, which deferred would
    # cost a query per step.
    steps = run.steps.filter(STEP_WENT_WRONG).order_by("index")
    return list(steps.only("run", "index", "kind", "tool_name", "error_class")[:limit])


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None


def step_as_dict(step: Step) -> dict:
    """A step as the JSON download and "copy as JSON" give it (attempts must be prefetched)."""
    return {
        "index": step.index,
        "turn": step.turn,
        "kind": step.kind,
        "thought": step.thought,
        "tool_name": step.tool_name,
        "tool_call_id": step.tool_call_id,
        "arguments": step.arguments,
        "result": step.result,
        "error": step.error,
        "error_class": step.error_class,
        "error_signature": step.error_signature,
        "success": step.success,
        "cached": step.cached,
        "stale": step.stale,
        "served_by": step.served_by,
        "started_at": _iso(step.started_at),
        "finished_at": _iso(step.finished_at),
        "duration_ms": step.duration_ms,
        "tokens_in": step.tokens_in,
        "tokens_out": step.tokens_out,
        "cost": step.cost,
        "validation_status": step.validation_status,
        "validation": step.validation,
        "attempts": [
            {
                "number": a.number,
                "started_at": a.started_at.isoformat(),
                "duration_ms": a.duration_ms,
                "error": a.error,
                "error_class": a.error_class,
                "retryable": a.retryable,
            }
            for a in (step.attempt_rows.all() if step.keeps_attempts else ())
        ],
        "child_run_ids": [child.pk for child in step.child_runs.all()] if step.starts_runs else [],
    }


def run_as_dict(run: Run) -> dict:
    """The run's header in the JSON download: everything but its steps."""
    return {
        "id": run.pk,
        "task": {"id": run.task_id, "kind": run.task_kind, "text": run.task.text},
        "parent_id": run.parent_id,
        "parent_step_id": run.parent_step_id,
        "status": run.status,
        "created_at": run.created_at.isoformat(),
        "started_at": _iso(run.started_at),
        "finished_at": _iso(run.finished_at),
        "llm_backend": run.llm_backend,
        "model_name": run.model_name,
        "system_prompt": run.system_prompt,
        "plan": run.plan,
        "tools_offered": run.tools_offered,
        "final_output": run.final_output,
        "error": run.error,
        "score": run.score,
        "outcome": run.outcome,
        "tokens_in": run.tokens_in,
        "tokens_out": run.tokens_out,
        "cost": run.cost,
        "applied_strategies": [
            {
                "strategy_id": a.strategy_version.strategy_id,
                "version": a.strategy_version.number,
                "arm": a.arm,
            }
            for a in run_applied_strategies(run)
        ],
    }
