"""One proposal per pattern: what makes two mined patterns the same proposal.

The miner reports what it counts (mining.py): one error signature, one evaluator's feedback, one
bigram. A reviewer wants one proposal per *pattern*: one failure that the rule evaluator, the
heuristic judge and the reference all see is one lesson, not three; two error signatures of the
same tool and error class (messages that differ by a path) get the same title and guidance, so
they are one proposal too. The identity (``proposal_key``, stored as the strategy's pattern_key):

- an error signature: task kind + tool + error class;
- evaluator feedback: task kind + the kind of shortfall it describes (proposals.feedback_category),
  whichever evaluator wrote it;
- the other kinds: the miner's own key (already the tool pair, the reply failure, the words).

Evaluator feedback whose failing runs another pattern already mostly explains (an error, a
malformed reply, a sequence) is folded into that pattern: its evaluator is listed among those
that agree, and no proposal of its own is written.
"""

from dataclasses import replace

from django.conf import settings
from django.db.models import Q

from feedback.models import Evaluation

from .patterns import Pattern
from .wording import feedback_category


def proposal_key(pattern: Pattern, category: str = "") -> str:
    """The identity of the proposal a pattern belongs to (``category``: an evaluator feedback's
    kind of shortfall)."""
    d = pattern.details
    if pattern.kind == "error_signature":
        return f"error_signature:{pattern.task_kind}:{d.get('tool', '')}:{d.get('error_class', '')}"[:200]
    if pattern.kind == "evaluator_feedback":
        return f"evaluator_feedback:{pattern.task_kind}:{category}"[:200]
    return pattern.key[:200]


def _category(pattern: Pattern) -> str:
    return feedback_category(pattern.details.get("evaluator_kind", ""), pattern.details.get("feedback", ""))[0]


def agreeing_evaluators(run_ids: list[int]) -> list[str]:
    """The automatic evaluators that judged some of these runs failing (a low score or a "not
    accomplished"): the evaluators that agree on a pattern whose evidence they are."""
    if not run_ids:
        return []
    said_no = Q(accomplished=False) | Q(score__lt=settings.STRATEGY_LOW_SCORE)
    rows = (
        Evaluation.objects.filter(run_id__in=run_ids, status=Evaluation.Status.OK)
        .exclude(kind=Evaluation.Kind.HUMAN)
        .filter(said_no)
        .values_list("evaluator", flat=True)
        .distinct()
    )
    return sorted(set(rows))


def _absorb(into: Pattern, other: Pattern) -> None:
    """``other`` is the same pattern seen another way: one proposal, the larger counts, both
    evidences and both evaluators."""
    if other.kind == into.kind and other.failing_with > into.failing_with:
        keep = dict(into.details)
        into.failing_with, into.succeeding_with = other.failing_with, other.succeeding_with
        into.failing_total, into.succeeding_total = other.failing_total, other.succeeding_total
        into.details = {**other.details, **{k: v for k, v in keep.items() if k == "evaluators"}}
    into.evidence = sorted(set(into.evidence) | set(other.evidence))
    into.mined_keys = sorted(set(into.mined_keys) | set(other.mined_keys))
    agreeing = set(into.details.get("evaluators", [])) | set(other.details.get("evaluators", []))
    into.details["evaluators"] = sorted(agreeing)


def one_per_pattern(patterns: list[Pattern]) -> list[Pattern]:
    """The mined patterns grouped into one per proposal, each keyed by ``proposal_key`` and with
    the evaluators that agree on it in ``details["evaluators"]``; ``mined_keys`` keeps the
    miner's keys it was made of (a proposal made before this identity is found by them). The miner's own list is left
    as it was (copies are grouped)."""
    copies = [replace(p, details=dict(p.details), evidence=list(p.evidence)) for p in patterns]
    for p in copies:
        p.mined_keys = [p.key[:200]]
        found = [p.details["evaluator"]] if p.kind == "evaluator_feedback" else []
        p.details["evaluators"] = sorted(set(found) | set(agreeing_evaluators(p.evidence)))
    explained = [p for p in copies if p.kind in ("error_signature", "malformed_reply", "tool_sequence")]
    grouped: dict[str, Pattern] = {}
    for p in sorted(copies, key=lambda p: (p.kind == "evaluator_feedback", -p.failing_with, p.key)):
        if p.kind == "evaluator_feedback":
            mine = set(p.evidence)
            cover = max(explained, key=lambda e: len(mine & set(e.evidence)), default=None)
            if cover is not None and cover.task_kind == p.task_kind and len(mine & set(cover.evidence)) * 2 > len(mine):
                _absorb(grouped[proposal_key(cover)], p)
                continue
        key = proposal_key(p, _category(p) if p.kind == "evaluator_feedback" else "")
        if key in grouped:
            _absorb(grouped[key], p)
        else:
            p.key = key
            grouped[key] = p
    return list(grouped.values())
