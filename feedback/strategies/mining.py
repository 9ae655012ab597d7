"""The mining job: recurring patterns among the recent failing runs.

A run is **failing** when its task was not accomplished (its outcome, decided by the
evaluators: an answer that gives up is failing even with a high score and no expected answer),
when it failed, or, where nothing decided its outcome (unknown), when it scored below
STRATEGY_LOW_SCORE; it is **succeeding** when it answered and its task was accomplished. The
outcome is evidence (a checker, a reference, a configured judge or a person); the score mixes in
heuristics, so it never overrules an outcome: a right answer the heuristic judge scored low is a
success.

The window is explicit: ``mine(window_days=N)`` reads the runs created in the last N days,
``mine(window_days=None)`` every run ever recorded; there is no default, so each caller says
which (the beat job and the "Analyse now" button pass STRATEGY_MINING_WINDOW_DAYS). Every scan,
steps and evaluations included, is bounded by the window's runs, found by their creation time
(the run indexes); the window is recorded with each pattern and so with each proposal.

Five kinds of pattern, each counted in the database over the window (never by loading runs):
- an error signature (tool + error class + normalised message) recurring in failing runs;
- a malformed or empty model reply (the main way small models fail; replies.py): a reply that
  was not valid JSON or had unusable tool_calls (JSON mode), an empty reply, a call to an unknown
  tool, or arguments that are not a JSON object or break the tool's parameters, by failure and
  reply mode;
- a tool-call sequence (a bigram of consecutive calls) present in failures, absent in successes;
- a task kind + keyword of the task text over-represented among failures;
- an evaluator's feedback recurring on low scores (by its first words, or, where the evaluator
  names the kind of shortfall, by that: the reference's feedback names each answer's own labels
  and numbers, so no two items' feedback read alike).

A pattern is kept when at least STRATEGY_MIN_SUPPORT failing runs show it and its share among
failing runs exceeds its share among succeeding runs by STRATEGY_MIN_LIFT: the contrast with
successes keeps out what every run does. Pattern and that contrast, shared with replies.py, are
in patterns.py.
"""

import re
from collections import defaultdict
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.db.models import BooleanField, Count, Exists, ExpressionWrapper, Min, OuterRef, Q, QuerySet, TextField
from django.db.models.fields.json import KT
from django.db.models.functions import Coalesce, Substr
from django.utils import timezone

from feedback.models import Evaluation, Run, Step

from .patterns import (
    BEGINNING,
    EVIDENCE_LIMIT,
    Pattern,
    _counted,
    _failing,
    _grouped_evaluations,
    _grouped_steps,
    _keep,
    _pattern,
    _succeeding,
    _window_runs,
    _window_steps,
)
from .replies import INVALID_CALL, malformed_replies
from .skipped import skipped_tools, unused_results

_STOPWORDS = frozenset(
    "the and for with what are this that from into each its their them they then than have has was were "
    "will your you all any can how who why please file files task".split()
)


def mine(*, window_days: int | None) -> list[Pattern]:
    """The patterns of the runs created in the last ``window_days`` days, or of every run ever
    recorded when ``window_days`` is None (no default: the caller says which)."""
    if window_days is not None and (isinstance(window_days, bool) or not isinstance(window_days, int)):
        raise TypeError(f"window_days is a whole number of days or None (all history), not {window_days!r}")
    if window_days is not None and window_days < 1:
        raise ValueError(f"window_days must be at least 1 (or None for all history), not {window_days}")
    since = BEGINNING if window_days is None else timezone.now() - timedelta(days=window_days)
    runs = _window_runs(since)
    totals = {
        row["task_kind"]: (row["failing"], row["succeeding"])
        for row in runs.values("task_kind").annotate(
            failing=Count("id", filter=_failing()), succeeding=Count("id", filter=_succeeding())
        )
    }
    patterns = (
        _error_signatures(since, totals)
        + malformed_replies(since, totals)
        + _sequences(since, totals)
        + skipped_tools(since, totals)
        + unused_results(since, totals)
        + _feedback(since, totals)
    )
    covered = {run for p in patterns for run in p.evidence}
    # A keyword pattern whose failures another pattern already explains adds only noise.
    patterns += [p for p in _keywords(since, totals) if len(set(p.evidence) - covered) > len(p.evidence) // 2]
    for pattern in patterns:
        pattern.window_days, pattern.since = window_days, None if window_days is None else since
    return sorted(patterns, key=lambda p: (-p.failing_with, p.key))


def _evidence(since: datetime, step_filter: Q) -> list[int]:
    return list(
        _window_steps(since)
        .filter(step_filter)
        .filter(_failing("run__"))
        .values_list("run_id", flat=True)
        .distinct()
        .order_by("run_id")[:EVIDENCE_LIMIT]
    )


def _error_steps(since) -> QuerySet[Step]:
    return (
        _grouped_steps(since)
        .filter(kind=Step.Kind.TOOL_CALL, success=False)
        .exclude(error_signature="")
        # Calls the model wrote wrong (unknown tool, unusable arguments) are malformed replies.
        .exclude(error_class=INVALID_CALL)
    )


def _error_signatures(since, totals) -> list[Pattern]:
    # Grouped from the step_mining_errors index alone (an index-only scan: no step row is read);
    # the example error, which the index does not hold, is read for the patterns kept only.
    groups = ("error_signature", "tool_name", "error_class", "run__task_kind")
    rows = (
        _error_steps(since)
        .filter(_counted("run__"))
        .values(*groups)
        .annotate(failing=Count("run", distinct=True, filter=_failing("run__")),
                  succeeding=Count("run", distinct=True, filter=_succeeding("run__")))
        .filter(failing__gte=settings.STRATEGY_MIN_SUPPORT)
    )  # fmt: skip
    kept = {}
    for row in rows:
        kind = row["run__task_kind"]
        pattern = _pattern(
            "error_signature",
            f"error_signature:{kind}:{row['error_signature']}",
            kind,
            row["failing"],
            row["succeeding"],
            totals,
            {"tool": row["tool_name"], "error_class": row["error_class"]},
        )
        if _keep(pattern):
            pattern.evidence = _evidence(since, Q(run__task_kind=kind, error_signature=row["error_signature"]))
            kept[tuple(row[g] for g in groups)] = pattern
    if kept:
        # The first error message of each group (all its steps, as the contrast's runs: any run).
        examples = (
            _error_steps(since)
            .filter(error_signature__in={group[0] for group in kept})
            .values(*groups)
            .annotate(example=Min("error"))
        )
        for row in examples:
            if (pattern := kept.get(tuple(row[g] for g in groups))) is not None:
                pattern.details["example_error"] = row["example"]
    return list(kept.values())


# What _failing() and _succeeding() say, for the raw SQL below (r is the run).
_FAILING_SQL = (
    "(r.outcome = %(not_accomplished)s OR r.status = %(failed)s OR (r.outcome = %(unknown)s AND r.score < %(low)s))"
)
_SUCCEEDING_SQL = "(r.status = %(succeeded)s AND r.outcome = %(accomplished)s)"

# Raw SQL: the bigrams come from a window function (LAG), and the ORM cannot group or count over
# a window function's value. One ordered pass: the step_mining_calls index gives the window's
# tool calls in run order with no step row read (an index-only scan, merge-joined with the
# counted runs: failing or succeeding), LAG pairs each with the previous one; the bigrams of a run
# are made distinct by a GROUP BY that the run order presorts (an incremental sort, in memory),
# so each group's runs are a plain count, not a COUNT(DISTINCT) that sorted every bigram of the
# window by its text to disk (a year at a million runs: 16.5 s before, 4.8 s).
_SEQUENCES_SQL = f"""
WITH calls AS (
    SELECT s.run_id, r.task_kind,
           LAG(s.tool_name) OVER (PARTITION BY s.run_id ORDER BY s."index") AS previous,
           s.tool_name AS tool,
           {_FAILING_SQL} AS failing,
           {_SUCCEEDING_SQL} AS succeeding
    FROM feedback_run r JOIN feedback_step s ON s.run_id = r.id
    WHERE r.created_at >= %(since)s AND ({_FAILING_SQL} OR {_SUCCEEDING_SQL})
      AND s.kind = 'tool_call' AND s.tool_name <> 'update_plan'
), bigrams AS (
    SELECT run_id, task_kind, previous, tool, failing, succeeding
    FROM calls
    WHERE previous IS NOT NULL AND previous <> tool
    GROUP BY run_id, task_kind, previous, tool, failing, succeeding
)
SELECT task_kind, previous, tool,
       COUNT(*) FILTER (WHERE failing) AS failing,
       COUNT(*) FILTER (WHERE succeeding) AS succeeding
FROM bigrams
GROUP BY task_kind, previous, tool
HAVING COUNT(*) FILTER (WHERE failing) >= %(support)s
"""


def _sql_params(since) -> dict:
    """What the raw SQL calls "failing" and "succeeding", as query parameters."""
    return {
        "failed": Run.Status.FAILED,
        "succeeded": Run.Status.SUCCEEDED,
        "not_accomplished": Run.Outcome.NOT_ACCOMPLISHED,
        "accomplished": Run.Outcome.ACCOMPLISHED,
        "unknown": Run.Outcome.UNKNOWN,
        "low": settings.STRATEGY_LOW_SCORE,
        "since": since,
        "support": settings.STRATEGY_MIN_SUPPORT,
    }


def _sequences(since, totals) -> list[Pattern]:
    params = _sql_params(since)
    with connection.cursor() as cursor:
        cursor.execute(_SEQUENCES_SQL, params)
        rows = cursor.fetchall()
    patterns = []
    for kind, previous, tool, failing, succeeding in rows:
        pattern = _pattern(
            "tool_sequence",
            f"tool_sequence:{kind}:{previous}>{tool}",
            kind,
            failing,
            succeeding,
            totals,
            {"sequence": [previous, tool]},
        )
        # "Absent in successes": at most one succeeding run in twenty shows it.
        if _keep(pattern) and succeeding <= max(0, pattern.succeeding_total // 20):
            pattern.evidence = _evidence(since, Q(run__task_kind=kind, tool_name=previous))
            pattern.details["first_call_failed_share"] = _failed_share(pattern.evidence, previous)
            patterns.append(pattern)
    return patterns


def _failed_share(run_ids: list[int], tool: str) -> float:
    counts = Step.objects.filter(run_id__in=run_ids, tool_name=tool).aggregate(
        total=Count("run", distinct=True), failed=Count("run", distinct=True, filter=Q(success=False))
    )
    return round(counts["failed"] / max(1, counts["total"]), 3)


# An evaluation's gist: the kind of shortfall its evaluator names (reference.py), or else the
# first words of its feedback; an evaluation says it when it names that shortfall or its
# feedback begins with those words.
_GIST = Coalesce(KT("details__shortfall"), Substr("feedback", 1, 120), output_field=TextField())


def _says(gist: str) -> Q:
    return Q(details__shortfall=gist) | Q(feedback__startswith=gist)


def _feedback(since, totals) -> list[Pattern]:
    evaluations = _grouped_evaluations(since)
    rows = list(
        evaluations.filter(status=Evaluation.Status.OK)
        .exclude(kind=Evaluation.Kind.HUMAN)
        # What it said of a failing run: a low score, or "not accomplished" at any score (the
        # reference's half-right triage, 0.5, is a verdict all the same).
        .filter(Q(score__lt=settings.STRATEGY_LOW_SCORE) | Q(accomplished=False))
        # Only the failing runs count here: the others are left out before the grouping.
        .filter(_failing("run__"))
        .annotate(gist=_GIST)
        .values("evaluator", "kind", "gist", "run__task_kind")
        .annotate(failing=Count("run", distinct=True), example=Min("feedback"))
        .filter(failing__gte=settings.STRATEGY_MIN_SUPPORT)
    )
    # The succeeding runs whose evaluation by the same evaluator says the same (at any score),
    # every group's count in one pass over the succeeding runs' evaluations.
    succeeding = {}
    if rows:
        same = {
            f"group_{i}": Q(run__task_kind=row["run__task_kind"], evaluator=row["evaluator"]) & _says(row["gist"])
            for i, row in enumerate(rows)
        }
        succeeding = evaluations.filter(
            _succeeding("run__"), evaluator__in={row["evaluator"] for row in rows}
        ).aggregate(**{name: Count("run", distinct=True, filter=q) for name, q in same.items()})
    patterns = []
    for i, row in enumerate(rows):
        kind = row["run__task_kind"]
        pattern = _pattern(
            "evaluator_feedback",
            f"evaluator_feedback:{kind}:{row['evaluator']}:{row['gist'][:80]}",
            kind,
            row["failing"],
            succeeding[f"group_{i}"],
            totals,
            {"evaluator": row["evaluator"], "evaluator_kind": row["kind"], "feedback": row["gist"]},
        )
        if not row["example"].startswith(row["gist"]):  # a kind of shortfall: one of its feedbacks
            pattern.details["example_feedback"] = row["example"]
        if _keep(pattern):
            said = Evaluation.objects.filter(_says(row["gist"]), run=OuterRef("pk"), evaluator=row["evaluator"])
            pattern.evidence = list(
                _window_runs(since)
                .filter(_failing(), Exists(said), task_kind=kind)
                .values_list("pk", flat=True)
                .distinct()
                .order_by("pk")[:EVIDENCE_LIMIT]
            )
            patterns.append(pattern)
    return patterns


# Raw SQL: the ORM cannot split a text into words (a set-returning function in a lateral join).
# The words of a run's task are made distinct in the lateral subquery, so a (kind, word) group
# counts its runs with plain counts rather than COUNT(DISTINCT) (a sort of every word of the
# window: a year at a million runs, 20 s before, 10 s); the runs that are neither failing nor
# succeeding are left out before their tasks are read.
_KEYWORDS_SQL = f"""
SELECT r.task_kind, w.word,
       COUNT(*) FILTER (WHERE {_FAILING_SQL}) AS failing,
       COUNT(*) FILTER (WHERE {_SUCCEEDING_SQL}) AS succeeding
FROM feedback_run r
JOIN feedback_task t ON t.id = r.task_id
CROSS JOIN LATERAL (
    SELECT DISTINCT word FROM regexp_split_to_table(lower(t.text), '[^a-z0-9_.-]+') AS word WHERE length(word) >= 3
) AS w
WHERE r.created_at >= %(since)s AND ({_FAILING_SQL} OR {_SUCCEEDING_SQL})
GROUP BY r.task_kind, w.word
HAVING COUNT(*) FILTER (WHERE {_FAILING_SQL}) >= %(support)s
"""


def _keyword_rows(since) -> list[tuple]:
    params = _sql_params(since)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(_KEYWORDS_SQL, params)
            return cursor.fetchall()
    # SQLite (the embedded default) cannot split text in SQL: count words of a bounded sample.
    counts: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    sample = _window_runs(since).annotate(is_failing=ExpressionWrapper(_failing(), output_field=BooleanField()))
    sample = sample.filter(_failing() | _succeeding())
    for kind, text, failing in sample.values_list("task_kind", "task__text", "is_failing")[:20000]:
        for word in set(re.split(r"[^a-z0-9_.-]+", text.lower())):
            if len(word) >= 3:
                counts[(kind, word)][0 if failing else 1] += 1
    return [(k, w, f, s) for (k, w), (f, s) in counts.items() if f >= settings.STRATEGY_MIN_SUPPORT]


def _keywords(since, totals) -> list[Pattern]:
    """Over-represented words; words that mark exactly the same failing runs make one pattern."""
    patterns = []
    for kind, word, failing, succeeding in _keyword_rows(since):
        word = word.strip(".-_")
        if word in _STOPWORDS or len(word) < 3 or word.isdigit():
            continue
        pattern = _pattern(
            "task_keywords",
            f"task_keywords:{kind}:{word}",
            kind,
            failing,
            succeeding,
            totals,
            {"keyword": word},
        )
        if _keep(pattern):
            pattern.evidence = list(
                _window_runs(since)
                .filter(_failing(), task_kind=kind, task__text__icontains=word)
                .values_list("pk", flat=True)
                .order_by("pk")[:EVIDENCE_LIMIT]
            )
            patterns.append(pattern)
    grouped: dict[tuple, Pattern] = {}
    for pattern in sorted(patterns, key=lambda p: p.details["keyword"]):
        same = grouped.setdefault((pattern.task_kind, tuple(pattern.evidence)), pattern)
        if same is not pattern:
            same.details.setdefault("keywords", [same.details["keyword"]]).append(pattern.details["keyword"])
    merged = list(grouped.values())
    for pattern in merged:
        words = pattern.details.setdefault("keywords", [pattern.details["keyword"]])
        pattern.key = f"task_keywords:{pattern.task_kind}:{'+'.join(words)}"
    return merged
