"""The mining job: recurring patterns among the recent failed and low-scoring runs.

Four kinds of pattern, each counted in the database over the window (never by loading runs):
- an error signature (tool + error class + normalised message) recurring in failing runs;
- a tool-call sequence (a bigram of consecutive calls) present in failures, absent in successes;
- a task kind + keyword of the task text over-represented among failures;
- an evaluator's feedback recurring on low scores.

A pattern is kept when at least STRATEGY_MIN_SUPPORT failing runs show it and its share among
failing runs exceeds its share among succeeding runs by STRATEGY_MIN_LIFT: the contrast with
successes keeps out what every run does.
"""

import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db import connection
from django.db.models import Count, Min, Q
from django.db.models.functions import Substr
from django.utils import timezone

from feedback.models import Evaluation, Run, Step

EVIDENCE_LIMIT = 200
_STOPWORDS = frozenset(
    "the and for with what are this that from into each its their them they then than have has was were "
    "will your you all any can how who why please file files task".split()
)


@dataclass
class Pattern:
    kind: str  # a Strategy.PatternKind value
    key: str  # identity: the same pattern mined again merges into the same strategy
    task_kind: str
    failing_with: int
    failing_total: int
    succeeding_with: int
    succeeding_total: int
    details: dict = field(default_factory=dict)
    evidence: list[int] = field(default_factory=list)

    @property
    def lift(self) -> float:
        return self.failing_with / max(1, self.failing_total) - self.succeeding_with / max(1, self.succeeding_total)

    @property
    def confidence(self) -> float:
        """How often a run showing the pattern was a failing one."""
        return self.failing_with / max(1, self.failing_with + self.succeeding_with)

    def contrast(self) -> dict:
        return {
            "failing_with": self.failing_with,
            "failing_total": self.failing_total,
            "succeeding_with": self.succeeding_with,
            "succeeding_total": self.succeeding_total,
            "lift": round(self.lift, 3),
            "confidence": round(self.confidence, 3),
            **self.details,
        }


def _pattern(
    kind: str, key: str, task_kind: str, failing: int, succeeding: int, totals: dict, details: dict
) -> Pattern:
    failing_total, succeeding_total = totals.get(task_kind, (0, 0))
    return Pattern(kind, key, task_kind, failing, failing_total, succeeding, succeeding_total, details)


def _failing(prefix: str = "") -> Q:
    return Q(**{f"{prefix}status": Run.Status.FAILED}) | Q(**{f"{prefix}score__lt": settings.STRATEGY_LOW_SCORE})


def _succeeding(prefix: str = "") -> Q:
    return Q(**{f"{prefix}status": Run.Status.SUCCEEDED, f"{prefix}score__gte": settings.STRATEGY_GOOD_SCORE})


def _keep(pattern: Pattern) -> bool:
    return pattern.failing_with >= settings.STRATEGY_MIN_SUPPORT and pattern.lift >= settings.STRATEGY_MIN_LIFT


def mine(window_days: int | None = None) -> list[Pattern]:
    since = timezone.now() - timedelta(days=window_days or settings.STRATEGY_MINING_WINDOW_DAYS)
    runs = Run.objects.filter(created_at__gte=since)
    totals = {
        row["task_kind"]: (row["failing"], row["succeeding"])
        for row in runs.values("task_kind").annotate(
            failing=Count("id", filter=_failing()), succeeding=Count("id", filter=_succeeding())
        )
    }
    patterns = _error_signatures(since, totals) + _sequences(since, totals) + _feedback(since, totals)
    covered = {run for p in patterns for run in p.evidence}
    # A keyword pattern whose failures another pattern already explains adds only noise.
    patterns += [p for p in _keywords(since, totals) if len(set(p.evidence) - covered) > len(p.evidence) // 2]
    return sorted(patterns, key=lambda p: (-p.failing_with, p.key))


def _evidence(step_filter: Q) -> list[int]:
    return list(
        Step.objects.filter(step_filter)
        .filter(_failing("run__"))
        .values_list("run_id", flat=True)
        .distinct()
        .order_by("run_id")[:EVIDENCE_LIMIT]
    )


def _error_signatures(since, totals) -> list[Pattern]:
    rows = (
        Step.objects.filter(run__created_at__gte=since, kind=Step.Kind.TOOL_CALL, success=False)
        .exclude(error_signature="")
        .values("error_signature", "tool_name", "error_class", "run__task_kind")
        .annotate(
            failing=Count("run", distinct=True, filter=_failing("run__")),
            succeeding=Count("run", distinct=True, filter=_succeeding("run__")),
            example=Min("error"),
        )
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
            pattern.evidence = _evidence(
                Q(run__created_at__gte=since, run__task_kind=kind, error_signature=row["error_signature"])
            )
            patterns.append(pattern)
    return patterns


_SEQUENCES_SQL = """
WITH calls AS (
    SELECT s.run_id, r.task_kind,
           LAG(s.tool_name) OVER (PARTITION BY s.run_id ORDER BY s."index") AS previous,
           s.tool_name AS tool,
           CASE WHEN r.status = %(failed)s OR r.score < %(low)s THEN 1 ELSE 0 END AS failing,
           CASE WHEN r.status = %(succeeded)s AND r.score >= %(good)s THEN 1 ELSE 0 END AS succeeding
    FROM feedback_step s JOIN feedback_run r ON r.id = s.run_id
    WHERE s.kind = 'tool_call' AND s.tool_name <> 'update_plan' AND r.created_at >= %(since)s
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
            pattern.evidence = _evidence(Q(run__created_at__gte=since, run__task_kind=kind, tool_name=previous))
            pattern.details["first_call_failed_share"] = _failed_share(pattern.evidence, previous)
            patterns.append(pattern)
    return patterns


def _failed_share(run_ids: list[int], tool: str) -> float:
    counts = Step.objects.filter(run_id__in=run_ids, tool_name=tool).aggregate(
        total=Count("run", distinct=True), failed=Count("run", distinct=True, filter=Q(success=False))
    )
    return round(counts["failed"] / max(1, counts["total"]), 3)


def _feedback(since, totals) -> list[Pattern]:
    rows = (
        Evaluation.objects.filter(run__created_at__gte=since, status=Evaluation.Status.OK)
        .exclude(kind=Evaluation.Kind.HUMAN)
        .filter(score__lt=settings.STRATEGY_LOW_SCORE)
        .annotate(gist=Substr("feedback", 1, 120))
        .values("evaluator", "gist", "run__task_kind")
        .annotate(failing=Count("run", distinct=True, filter=_failing("run__")))
        .filter(failing__gte=settings.STRATEGY_MIN_SUPPORT)
    )
    patterns = []
    for row in rows:
        kind = row["run__task_kind"]
        succeeding = (
            Evaluation.objects.filter(run__created_at__gte=since, run__task_kind=kind, evaluator=row["evaluator"])
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
            {"evaluator": row["evaluator"], "feedback": row["gist"]},
        )
        if _keep(pattern):
            pattern.evidence = list(
                Run.objects.filter(_failing(), created_at__gte=since, task_kind=kind)
                .filter(evaluations__evaluator=row["evaluator"], evaluations__feedback__startswith=row["gist"])
                .values_list("pk", flat=True)
                .distinct()
                .order_by("pk")[:EVIDENCE_LIMIT]
            )
            patterns.append(pattern)
    return patterns


_KEYWORDS_SQL = """
SELECT r.task_kind, w.word,
       COUNT(DISTINCT r.id) FILTER (WHERE r.status = %(failed)s OR r.score < %(low)s) AS failing,
       COUNT(DISTINCT r.id) FILTER (WHERE r.status = %(succeeded)s AND r.score >= %(good)s) AS succeeding
FROM feedback_run r
JOIN feedback_task t ON t.id = r.task_id
CROSS JOIN LATERAL regexp_split_to_table(lower(t.text), '[^a-z0-9_.-]+') AS w(word)
WHERE r.created_at >= %(since)s AND length(w.word) >= 3
GROUP BY r.task_kind, w.word
HAVING COUNT(DISTINCT r.id) FILTER (WHERE r.status = %(failed)s OR r.score < %(low)s) >= %(support)s
"""


def _keyword_rows(since) -> list[tuple]:
    params = _sql_params(since)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(_KEYWORDS_SQL, params)
            return cursor.fetchall()
    # SQLite (the embedded default) cannot split text in SQL: count words of a bounded sample.
    counts: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    sample = Run.objects.filter(created_at__gte=since).filter(_failing() | _succeeding())
    for kind, text, status, score in sample.values_list("task_kind", "task__text", "status", "score")[:20000]:
        failing = status == Run.Status.FAILED or (score is not None and score < settings.STRATEGY_LOW_SCORE)
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
                Run.objects.filter(_failing(), created_at__gte=since, task_kind=kind, task__text__icontains=word)
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
