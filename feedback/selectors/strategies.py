"""The strategy list, one strategy, and what it changes in a sample task's prompt."""

import difflib

from django.db.models import QuerySet
from django.shortcuts import get_object_or_404

from feedback.agent.prompts import build_system_prompt
from feedback.models import AppliedStrategy, Strategy
from feedback.strategies import injection
from feedback.strategies.insight_ops import insights_diff


def strategy_list(*, status: str = "", kind: str = "") -> QuerySet[Strategy]:
    """``kind``: a pattern kind (Strategy.PatternKind), "" for every kind."""
    strategies = Strategy.objects.select_related("current_version").order_by("-updated_at")
    if status:
        strategies = strategies.filter(status=status)
    if kind:
        strategies = strategies.filter(pattern_kind=kind)
    return strategies


def insight_changes(strategy: Strategy, number: int | None = None) -> dict | None:
    """An insight list's version ``number`` (default: the one in use) against the version before it:
    ``{"version", "previous", "changes", "numbers"}``; None for a strategy without insight lists or
    a number it has no version of."""
    if strategy.pattern_kind != Strategy.PatternKind.INSIGHTS:
        return None
    versions = {v.number: v for v in strategy.versions.only("pk", "number", "insights", "created_at")}
    number = number if number is not None else (strategy.current_version.number if strategy.current_version else None)
    version = versions.get(number)
    if version is None:
        return None
    previous = max((n for n in versions if n < number), default=None)
    before = versions[previous].insights if previous is not None else []
    return {
        "version": version,
        "previous": versions.get(previous),
        "changes": insights_diff(before, version.insights),
        "numbers": sorted(versions),
    }


def strategy_prompt_diff(strategy: Strategy) -> dict:
    """The exact system prompt of a sample matching task, without and with the strategy."""

    version = strategy.current_version
    sample = strategy.evidence.select_related("task").order_by("-pk").first()
    if version is None or sample is None:
        return {"sample": None, "lines": []}
    others = injection.select(sample, exclude=strategy.pk)
    before = build_system_prompt(others.guidance, others.examples, others.insights)
    others.add(version, AppliedStrategy.Arm.ACTIVE)
    after = build_system_prompt(others.guidance, others.examples, others.insights)
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
