"""The strategy list, one strategy, and what it changes in a sample task's prompt."""

import difflib

from django.db.models import QuerySet
from django.shortcuts import get_object_or_404

from feedback.agent.prompts import build_system_prompt
from feedback.models import Strategy
from feedback.strategies import injection


def strategy_list(*, status: str = "") -> QuerySet[Strategy]:
    strategies = Strategy.objects.select_related("current_version").order_by("-updated_at")
    if status:
        strategies = strategies.filter(status=status)
    return strategies


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
