"""Insight lists, ExpeL-style: one strategy per task kind whose content is a list of insights with
votes (insight_ops.py), updated from failure/success pairs of that kind (insight_writer.py).

**Pairs.** From the window's production runs that every reader may see (as worked examples: never
an experiment's or a playground's run, never one on a person's private workspace, never a
sub-agent's), each failing run (mining.py's definition) not yet compared is paired with the most
similar succeeding run of its kind: the same task template first (the same task with other numbers,
strata.py), then the most tools in common, then the least used in pairs so far, then the newest.
Each failing run is compared once (``InsightPair``, one per failing run, holds what came of it);
a pass compares at most PAIRS_PER_UPDATE of them, oldest first, so a slow model bounds its cost.

**Versions.** The pairs of a kind are applied one after another to the newest version's list; when
the list changed, one new version holds it, and the audit log says which operations made it:
- no strategy yet: the insight strategy is proposed with it (its condition: that task kind);
- a proposal: the new version is its current one (as an edit would be);
- in an experiment, on trial or active: the new version waits; the version in use stays until a
  reviewer adopts the new one (``strategy_version_adopt``, not while a test runs), so a live
  strategy's content never changes behind a reviewer's back;
- rejected or rolled back: the kind's pairs are left alone (a decision is not undone).
"""

import logging
from collections import Counter, defaultdict
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Count, Max, QuerySet
from django.utils import timezone

from feedback.models import InsightPair, Run, Step, Strategy, StrategyEvent, StrategyVersion

from .insight_ops import apply_operations as _apply
from .insight_ops import insights_diff
from .insight_writer import write
from .patterns import BEGINNING, _failing, _succeeding
from .services import strategy_event_record
from .strata import task_template

logger = logging.getLogger(__name__)
PAIRS_PER_UPDATE = 8
CANDIDATES = 200  # succeeding runs of a kind a failing run is matched against (the newest)
_DECIDED_AGAINST = (Strategy.Status.REJECTED, Strategy.Status.ROLLED_BACK)


def pattern_key(task_kind: str) -> str:
    return f"insights:{task_kind}"


def _readable(since) -> QuerySet[Run]:
    runs = Run.objects.filter(purpose=Run.Purpose.PRODUCTION, parent=None).exclude(task__workspace__owner__isnull=False)
    return runs if since == BEGINNING else runs.filter(created_at__gte=since)


def _tools(run_ids: list[int]) -> dict[int, set[str]]:
    tools: dict[int, set[str]] = defaultdict(set)
    calls = Step.objects.filter(run_id__in=run_ids, kind=Step.Kind.TOOL_CALL, success=True).exclude(
        tool_name="update_plan"
    )
    for run_id, tool in calls.values_list("run_id", "tool_name").distinct():
        tools[run_id].add(tool)
    return tools


def insight_pairs(*, window_days: int | None, limit: int = PAIRS_PER_UPDATE) -> list[tuple[Run, Run]]:
    """Up to ``limit`` (failing run, succeeding run) pairs not compared yet, oldest failure first,
    of the runs created in the last ``window_days`` days (None: all history)."""
    since = BEGINNING if window_days is None else timezone.now() - timedelta(days=window_days)
    closed = Strategy.objects.filter(pattern_kind=Strategy.PatternKind.INSIGHTS, status__in=_DECIDED_AGAINST)
    closed_kinds = [key.split(":", 1)[1] for key in closed.values_list("pattern_key", flat=True)]
    runs = _readable(since)
    succeeding_kinds = set(runs.filter(_succeeding()).values_list("task_kind", flat=True).distinct())
    failing = list(
        runs.filter(
            _failing(),
            status__in=[Run.Status.SUCCEEDED, Run.Status.FAILED],
            insight_pair=None,
            task_kind__in=succeeding_kinds,
        )
        .exclude(task_kind__in=closed_kinds)
        .select_related("task")
        .order_by("created_at", "pk")[:limit]
    )
    if not failing:
        return []
    candidates = {
        kind: list(
            runs.filter(_succeeding(), task_kind=kind)
            .select_related("task")
            .order_by("-created_at", "-pk")[:CANDIDATES]
        )
        for kind in {run.task_kind for run in failing}
    }
    every = [r.pk for r in failing] + [r.pk for rs in candidates.values() for r in rs]
    tools = _tools(every)
    used = Counter(
        dict(
            InsightPair.objects.filter(succeeding_run_id__in=every)
            .values_list("succeeding_run_id")
            .annotate(n=Count("pk"))
            .values_list("succeeding_run_id", "n")
        )
    )
    pairs = []
    for run in failing:
        template = task_template(run.task.text)

        def likeness(good: Run, run=run, template=template) -> tuple:
            same_task = task_template(good.task.text) == template
            return (same_task, len(tools[good.pk] & tools[run.pk]), -used[good.pk])

        best = max(candidates[run.task_kind], key=likeness, default=None)  # max keeps the newest of equals
        if best is not None:
            used[best.pk] += 1
            pairs.append((run, best))
    return pairs


def insights_update(*, window_days: int | None) -> list[Strategy]:
    """Compare the pairs not compared yet (``insight_pairs``) and update each kind's insight list;
    returns the strategies proposed or given a new version. The beat job's and the mining
    command's, beside the mining of patterns."""
    by_kind: dict[str, list[tuple[Run, Run]]] = defaultdict(list)
    for failing, succeeding in insight_pairs(window_days=window_days):
        by_kind[failing.task_kind].append((failing, succeeding))
    touched = []
    for kind, pairs in sorted(by_kind.items()):
        strategy = _update_kind(kind, pairs, window_days)
        if strategy is not None:
            touched.append(strategy)
    return touched


def _newest(strategy: Strategy | None) -> StrategyVersion | None:
    return strategy.versions.order_by("-number").first() if strategy is not None else None


def _update_kind(kind: str, pairs: list[tuple[Run, Run]], window_days: int | None) -> Strategy | None:
    strategy = Strategy.objects.filter(pattern_key=pattern_key(kind)).first()
    base = _newest(strategy)
    start = list(base.insights) if base is not None else []
    insights, compared = start, []
    # The model calls are made before any transaction: a slow model holds no lock.
    for failing, succeeding in pairs:
        written = write(kind, failing, succeeding, insights)
        insights, applied, ignored = _apply(insights, written.operations)
        compared.append((failing, succeeding, written, applied, written.ignored + ignored))
    try:
        with transaction.atomic():
            return _save(kind, strategy, base, start, insights, compared, window_days)
    except IntegrityError:
        # Another pass compared these runs (or proposed the kind's list) first: its result stands.
        logger.info("insights of %s were updated by another pass meanwhile; this one is dropped", kind)
        return None


def _save(kind, strategy, base, start, insights, compared, window_days) -> Strategy | None:
    if strategy is not None:
        strategy = Strategy.objects.select_for_update().get(pk=strategy.pk)
        newest = _newest(strategy)
        if strategy.status in _DECIDED_AGAINST or getattr(newest, "pk", None) != getattr(base, "pk", None):
            # Decided on, or edited, while the writer worked: what it wrote rests on another list.
            # The pairs stay uncompared; the next pass reads them again.
            return None
    changed = insights != start
    version = None
    if changed and strategy is None:
        strategy, version = _propose(kind, insights, len(compared), window_days)
    elif changed:
        version = _new_version(strategy, base, insights, compared)
    failing_ids = [failing.pk for failing, *_ in compared]
    InsightPair.objects.bulk_create(
        [
            InsightPair(
                task_kind=kind,
                failing_run=failing,
                succeeding_run=succeeding,
                strategy=strategy,
                version=version,
                operations=[op.as_json() for op in applied],
                ignored=[i.as_json() for i in ignored],
                writer=written.writer,
                call=written.call,
            )
            for failing, succeeding, written, applied, ignored in compared
        ]
    )
    if strategy is None:
        return None
    strategy.evidence.add(*failing_ids)
    pairs_total = InsightPair.objects.filter(strategy=strategy).count()
    summary = {**(strategy.evidence_summary or {}), "task_kind": kind, "pairs": pairs_total}
    Strategy.objects.filter(pk=strategy.pk).update(
        support=pairs_total, evidence_summary=summary, updated_at=timezone.now()
    )
    if version is None:
        return None
    strategy.refresh_from_db()
    _log(strategy, version, start, insights, compared)
    return strategy


def _content(kind: str, insights: list[dict]) -> dict:
    words = kind.replace("_", " ")
    return {
        "title": f"Insights for {words} tasks",
        "pattern": f"Failed and successful {words} runs compared pair by pair: insights with votes, as in ExpeL.",
        "new_guidance": f"The insights below go into the prompt of every {words} run, best voted first.",
        "condition": {"task_kinds": [kind]},
        "insights": insights,
    }


def _propose(kind: str, insights: list[dict], pairs: int, window_days: int | None) -> tuple[Strategy, StrategyVersion]:
    content = _content(kind, insights)
    strategy = Strategy.objects.create(
        title=content["title"],
        pattern_kind=Strategy.PatternKind.INSIGHTS,
        pattern_key=pattern_key(kind),
        support=pairs,
        evidence_summary={"task_kind": kind, "pairs": pairs, "window_days": window_days},
        trial_fraction=settings.STRATEGY_TRIAL_FRACTION,
    )
    version = StrategyVersion.objects.create(strategy=strategy, number=1, **content)
    strategy.current_version = version
    strategy.save(update_fields=["current_version"])
    return strategy, version


def _new_version(strategy: Strategy, base: StrategyVersion, insights: list[dict], compared) -> StrategyVersion:
    fields = ("title", "pattern", "old_behaviour", "new_guidance", "condition", "guardrails", "worked_example")
    number = (strategy.versions.aggregate(n=Max("number"))["n"] or 0) + 1
    version = StrategyVersion.objects.create(
        strategy=strategy, number=number, insights=insights, **{f: getattr(base, f) for f in fields}
    )
    if strategy.status == Strategy.Status.PROPOSED:
        strategy.current_version = version
        strategy.save(update_fields=["current_version", "updated_at"])
    return version


def _log(strategy: Strategy, version: StrategyVersion, start: list[dict], insights: list[dict], compared) -> None:
    ops = [
        {
            "failing_run": failing.pk,
            "succeeding_run": succeeding.pk,
            "writer": written.writer,
            "operations": [str(op) for op in applied],
            "ignored": len(ignored),
        }
        for failing, succeeding, written, applied, ignored in compared
    ]
    n = len(compared)
    if version.number == 1:
        action, reason = StrategyEvent.Action.PROPOSE, f"Insights written from {n} failure/success pair(s)."
    elif strategy.current_version_id == version.pk:
        action, reason = StrategyEvent.Action.EDIT, f"Insights updated from {n} failure/success pair(s)."
    else:
        action = StrategyEvent.Action.EDIT
        reason = (
            f"Insights updated from {n} failure/success pair(s) as v{version.number}, which waits for a reviewer "
            f"to adopt it: v{strategy.current_version.number} stays in use."
        )
    strategy_event_record(
        strategy=strategy,
        version=version,
        action=action,
        actor=None,
        reason=reason,
        from_status="" if action == StrategyEvent.Action.PROPOSE else strategy.status,
        pairs=ops,
        changes=insights_diff(start, insights),
    )


def pending_version(strategy: Strategy) -> StrategyVersion | None:
    """The newest version when it is newer than the one in use (an update waiting for adoption)."""
    newest = _newest(strategy)
    current = strategy.current_version
    if newest is None or current is None or newest.number <= current.number:
        return None
    return newest
