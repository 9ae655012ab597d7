"""The mining job as it was before issue 16 made it set-based (mining.py and replies.py of
5d3cbb9, frozen): test_strategy_mining_same.py checks that the new job finds the same patterns
on the same histories. Not to be maintained beside the real one: delete it with that test when
the mining job changes what it finds on purpose."""

import re
from collections import defaultdict
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.db.models import BooleanField, Case, CharField, Count, ExpressionWrapper, Min, Q, QuerySet, Value, When
from django.db.models.functions import Substr
from django.utils import timezone

from feedback.models import Evaluation, Run, Step
from feedback.strategies.patterns import BEGINNING, EVIDENCE_LIMIT, Pattern, _keep, _pattern


def _failing(prefix: str = "") -> Q:
    return (
        Q(**{f"{prefix}outcome": Run.Outcome.NOT_ACCOMPLISHED})
        | Q(**{f"{prefix}status": Run.Status.FAILED})
        | Q(**{f"{prefix}score__lt": settings.STRATEGY_LOW_SCORE})
    )


def _succeeding(prefix: str = "") -> Q:
    return Q(
        **{
            f"{prefix}status": Run.Status.SUCCEEDED,
            f"{prefix}outcome": Run.Outcome.ACCOMPLISHED,
            f"{prefix}score__gte": settings.STRATEGY_GOOD_SCORE,
        }
    )


def _window_runs(since: datetime) -> QuerySet:
    return Run.objects.all() if since == BEGINNING else Run.objects.filter(created_at__gte=since)


# Rows of a run's steps or evaluations are bounded by the window twice: by a semi-join on the
# run ids the window's creation times select (an index range scan of run_recent), which lets
# PostgreSQL read those runs' rows by their run index (nested loops), and by the joined run's own
# created_at, so that join reads the window's runs by the index too. Bounded by the join alone,
# PostgreSQL read every error step of the history through the partial error-signature index and
# dropped the old ones after (1.4 s instead of 0.1 s for 30 days of a 200,000-run history).
def _window_steps(since: datetime) -> QuerySet:
    if since == BEGINNING:
        return Step.objects.all()
    return Step.objects.filter(run_id__in=_window_runs(since).values("id"), run__created_at__gte=since)


def _window_evaluations(since: datetime) -> QuerySet:
    if since == BEGINNING:
        return Evaluation.objects.all()
    return Evaluation.objects.filter(run_id__in=_window_runs(since).values("id"), run__created_at__gte=since)


def _failing_steps_contrast() -> dict:
    """Per group of steps: the failing and the succeeding runs that have one, and an example error."""
    return {
        "failing": Count("run", distinct=True, filter=_failing("run__")),
        "succeeding": Count("run", distinct=True, filter=_succeeding("run__")),
        "example": Min("error"),
    }


# How the agent records them (feedback/agent/loop.py and invoker.py): a reply the loop could not
# use is a model_error step, "MalformedReply" (JSON mode: parse_json_reply's message says what was
# wrong) or "EmptyReply"; a tool call the model wrote wrong is a failed tool_call step,
# "InvalidToolCall" (an unknown tool, or arguments that are not a JSON object or break the
# tool's JSON Schema). "LLMError" (the endpoint could not be reached) is not the model's reply.
MALFORMED, EMPTY, INVALID_CALL = "MalformedReply", "EmptyReply", "InvalidToolCall"

# The failure, from the recorded message (the messages are the runtime's own, in English).
REPLY_FAILURE = Case(
    When(error_class=EMPTY, then=Value("empty_reply")),
    When(error_class=MALFORMED, error__startswith="Your reply", then=Value("invalid_json")),
    When(error_class=MALFORMED, then=Value("bad_tool_calls")),
    When(error_class=INVALID_CALL, error__startswith="Unknown tool", then=Value("unknown_tool")),
    When(error_class=INVALID_CALL, error__startswith="The arguments", then=Value("malformed_arguments")),
    When(error_class=INVALID_CALL, error__startswith="Invalid arguments for", then=Value("invalid_arguments")),
    # Anything else ("the parameters' schema cannot be used", an MCP server's) is not the model's.
    default=Value(""),
    output_field=CharField(),
)
# The reply mode, as far as the step shows it: a MalformedReply only exists in JSON mode, and
# JSON mode names its calls "json-<turn>-<i>" (llm.parse_json_reply). An empty text in JSON mode
# is invalid JSON, so an EmptyReply is native (or, rarely, a JSON reply with an empty answer).
REPLY_MODE = Case(
    When(error_class=MALFORMED, then=Value("json")),
    When(tool_call_id__startswith="json-", then=Value("json")),
    default=Value("native"),
    output_field=CharField(),
)


def reply_failure(*, error_class: str, error: str, tool_call_id: str = "") -> tuple[str, str] | None:
    """(failure, mode) of one step, as REPLY_FAILURE and REPLY_MODE say in SQL; None when the
    step is not a malformed or empty reply. For the review page, which reads a few steps."""
    if error_class == EMPTY:
        failure = "empty_reply"
    elif error_class == MALFORMED:
        failure = "invalid_json" if error.startswith("Your reply") else "bad_tool_calls"
    elif error_class == INVALID_CALL and error.startswith("Unknown tool"):
        failure = "unknown_tool"
    elif error_class == INVALID_CALL and error.startswith("The arguments"):
        failure = "malformed_arguments"
    elif error_class == INVALID_CALL and error.startswith("Invalid arguments for"):
        failure = "invalid_arguments"
    else:
        return None
    mode = "json" if error_class == MALFORMED or tool_call_id.startswith("json-") else "native"
    return failure, mode


def _reply_steps(since: datetime) -> QuerySet[Step]:
    return (
        _window_steps(since)
        .filter(kind__in=[Step.Kind.MODEL_ERROR, Step.Kind.TOOL_CALL], error_class__in=[MALFORMED, EMPTY, INVALID_CALL])
        .annotate(failure=REPLY_FAILURE, mode=REPLY_MODE)
        .exclude(failure="")
    )


def malformed_replies(since, totals) -> list[Pattern]:
    rows = (
        _reply_steps(since)
        .values("failure", "mode", "run__task_kind")
        .annotate(**_failing_steps_contrast())
        .filter(failing__gte=settings.STRATEGY_MIN_SUPPORT)
    )
    patterns = []
    for row in rows:
        kind, failure, mode = row["run__task_kind"], row["failure"], row["mode"]
        pattern = _pattern(
            "malformed_reply",
            f"malformed_reply:{kind}:{failure}:{mode}",
            kind,
            row["failing"],
            row["succeeding"],
            totals,
            {"failure": failure, "mode": mode, "example_error": row["example"]},
        )
        if not _keep(pattern):
            continue
        pattern.evidence = list(
            _reply_steps(since)
            .filter(run__task_kind=kind, failure=failure, mode=mode)
            .filter(_failing("run__"))
            .values_list("run_id", flat=True)
            .distinct()
            .order_by("run_id")[:EVIDENCE_LIMIT]
        )
        pattern.details.update(_remedy_facts(since, kind, pattern.evidence))
        patterns.append(pattern)
    return patterns


def _remedy_facts(since: datetime, kind: str, evidence: list[int]) -> dict:
    """What the remedies need to know, from the window: the tools the succeeding runs of the kind
    used (a smaller offer), the tools the evidence runs were offered, and whether native tool
    calls worked with the evidence runs' models (a switch to native mode is safe only then)."""
    used = sorted(
        set(
            _window_steps(since)
            .filter(run__task_kind=kind, kind=Step.Kind.TOOL_CALL, success=True)
            .filter(_succeeding("run__"))
            .values_list("tool_name", flat=True)
            .distinct()[:50]
        )
    )
    offered: set[str] = set()
    models: set[str] = set()
    for tools, model in Run.objects.filter(pk__in=evidence).values_list("tools_offered", "model_name"):
        offered |= {t for t in tools or [] if isinstance(t, str)}
        models.add(model)
    native = (
        _window_steps(since)
        .filter(kind=Step.Kind.TOOL_CALL, run__model_name__in=models - {""}, run__llm_backend="openai")
        .exclude(error_class=INVALID_CALL)
        .exclude(tool_call_id__startswith="json-")
        .exclude(tool_call_id="")
        .exists()
    )
    return {"tools_used_by_successes": used, "tools_offered": sorted(offered), "native_tool_calls_work": native}


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


def _error_signatures(since, totals) -> list[Pattern]:
    rows = (
        _window_steps(since)
        .filter(kind=Step.Kind.TOOL_CALL, success=False)
        .exclude(error_signature="")
        # Calls the model wrote wrong (unknown tool, unusable arguments) are malformed replies.
        .exclude(error_class=INVALID_CALL)
        .values("error_signature", "tool_name", "error_class", "run__task_kind")
        .annotate(**_failing_steps_contrast())
        .filter(failing__gte=settings.STRATEGY_MIN_SUPPORT)
    )
    patterns = []
    for row in rows:
        kind = row["run__task_kind"]
        pattern = _pattern(
            "error_signature",
            f"error_signature:{kind}:{row['error_signature']}",
            kind,
            row["failing"],
            row["succeeding"],
            totals,
            {"tool": row["tool_name"], "error_class": row["error_class"], "example_error": row["example"]},
        )
        if _keep(pattern):
            pattern.evidence = _evidence(since, Q(run__task_kind=kind, error_signature=row["error_signature"]))
            patterns.append(pattern)
    return patterns


# What _failing() and _succeeding() say, for the raw SQL below (r is the run).
_FAILING_SQL = "(r.outcome = %(not_accomplished)s OR r.status = %(failed)s OR r.score < %(low)s)"
_SUCCEEDING_SQL = "(r.status = %(succeeded)s AND r.outcome = %(accomplished)s AND r.score >= %(good)s)"

_SEQUENCES_SQL = f"""
WITH calls AS (
    SELECT s.run_id, r.task_kind,
           LAG(s.tool_name) OVER (PARTITION BY s.run_id ORDER BY s."index") AS previous,
           s.tool_name AS tool,
           CASE WHEN {_FAILING_SQL} THEN 1 ELSE 0 END AS failing,
           CASE WHEN {_SUCCEEDING_SQL} THEN 1 ELSE 0 END AS succeeding
    FROM feedback_run r JOIN feedback_step s ON s.run_id = r.id
    -- The window twice, as _window_steps: the steps of the window's runs by their run index.
    WHERE r.created_at >= %(since)s
      AND s.run_id IN (SELECT w.id FROM feedback_run w WHERE w.created_at >= %(since)s)
      AND s.kind = 'tool_call' AND s.tool_name <> 'update_plan'
)
SELECT task_kind, previous, tool,
       COUNT(DISTINCT CASE WHEN failing = 1 THEN run_id END) AS failing,
       COUNT(DISTINCT CASE WHEN succeeding = 1 THEN run_id END) AS succeeding
FROM calls
WHERE previous IS NOT NULL AND previous <> tool
GROUP BY task_kind, previous, tool
HAVING COUNT(DISTINCT CASE WHEN failing = 1 THEN run_id END) >= %(support)s
"""


def _sql_params(since) -> dict:
    """What the raw SQL calls "failing" and "succeeding", as query parameters."""
    return {
        "failed": Run.Status.FAILED,
        "succeeded": Run.Status.SUCCEEDED,
        "not_accomplished": Run.Outcome.NOT_ACCOMPLISHED,
        "accomplished": Run.Outcome.ACCOMPLISHED,
        "low": settings.STRATEGY_LOW_SCORE,
        "good": settings.STRATEGY_GOOD_SCORE,
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


def _feedback(since, totals) -> list[Pattern]:
    evaluations = _window_evaluations(since)
    rows = (
        evaluations.filter(status=Evaluation.Status.OK)
        .exclude(kind=Evaluation.Kind.HUMAN)
        .filter(score__lt=settings.STRATEGY_LOW_SCORE)
        .annotate(gist=Substr("feedback", 1, 120))
        .values("evaluator", "kind", "gist", "run__task_kind")
        .annotate(failing=Count("run", distinct=True, filter=_failing("run__")))
        .filter(failing__gte=settings.STRATEGY_MIN_SUPPORT)
    )
    patterns = []
    for row in rows:
        kind = row["run__task_kind"]
        succeeding = (
            evaluations.filter(run__task_kind=kind, evaluator=row["evaluator"])
            .filter(feedback__startswith=row["gist"])
            .filter(_succeeding("run__"))
            .values("run")
            .distinct()
            .count()
        )
        pattern = _pattern(
            "evaluator_feedback",
            f"evaluator_feedback:{kind}:{row['evaluator']}:{row['gist'][:80]}",
            kind,
            row["failing"],
            succeeding,
            totals,
            {"evaluator": row["evaluator"], "evaluator_kind": row["kind"], "feedback": row["gist"]},
        )
        if _keep(pattern):
            pattern.evidence = list(
                _window_runs(since)
                .filter(_failing(), task_kind=kind)
                .filter(evaluations__evaluator=row["evaluator"], evaluations__feedback__startswith=row["gist"])
                .values_list("pk", flat=True)
                .distinct()
                .order_by("pk")[:EVIDENCE_LIMIT]
            )
            patterns.append(pattern)
    return patterns


_KEYWORDS_SQL = f"""
SELECT r.task_kind, w.word,
       COUNT(DISTINCT r.id) FILTER (WHERE {_FAILING_SQL}) AS failing,
       COUNT(DISTINCT r.id) FILTER (WHERE {_SUCCEEDING_SQL}) AS succeeding
FROM feedback_run r
JOIN feedback_task t ON t.id = r.task_id
CROSS JOIN LATERAL regexp_split_to_table(lower(t.text), '[^a-z0-9_.-]+') AS w(word)
WHERE r.created_at >= %(since)s AND length(w.word) >= 3
GROUP BY r.task_kind, w.word
HAVING COUNT(DISTINCT r.id) FILTER (WHERE {_FAILING_SQL}) >= %(support)s
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
