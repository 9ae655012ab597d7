"""What the learning cycle (strategies/cycle.py) measures: the reviewer's picks, and the strategy
kinds one by one (``--kinds``). Each kind makes, of one part of a family's picked strategy
versions, the change of a paired experiment on the held-out items, so that part's effect is
measured alone. The insight list (insights.py) is a strategy of its own: the family's list is
picked beside the proposals and measured by its own experiment."""

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from django.conf import settings

from feedback.agent.prompts import WORKED_EXAMPLES_HEADING
from feedback.models import DatasetItem, Experiment, Strategy, StrategyVersion

from . import cycle_report
from .conditions import matches
from .demo import reviewers_pick
from .insights import insights_update

if TYPE_CHECKING:
    from .cycle import Cycle

INSIGHT_PASSES = 20  # of insights.PAIRS_PER_UPDATE pairs each: every failing run of a full baseline


def _guidance(versions: Sequence[StrategyVersion]) -> tuple[str, dict] | None:
    texts = [v.new_guidance.strip() for v in versions if v.new_guidance.strip()]
    return ("guidance", {"guidance": "\n".join(texts)}) if texts else None


def _examples(versions: Sequence[StrategyVersion]) -> tuple[str, dict] | None:
    # No experiment change places text in the prompt's worked-example section: the examples go in
    # as guidance text, under the same heading the prompt gives them (agent/prompts.py).
    texts = [v.worked_example.strip() for v in versions if v.worked_example.strip()]
    return ("guidance", {"guidance": WORKED_EXAMPLES_HEADING + "\n\n" + "\n\n".join(texts)}) if texts else None


def _guardrails(versions: Sequence[StrategyVersion]) -> tuple[str, dict] | None:
    rules = [rule for v in versions for rule in v.guardrails if isinstance(rule, dict)]
    return ("guardrails", {"guardrails": rules}) if rules else None


# Each strategy kind measured on its own (``kinds``): the experiment change (its kind and content)
# made of that part of a family's picked versions, None when they have none of it.
KINDS: dict[str, Callable[[Sequence[StrategyVersion]], tuple[str, dict] | None]] = {
    "guidance": _guidance,
    "examples": _examples,
    "guardrails": _guardrails,
}


# The content of a version that keeps one kind and drops the others (``revise``).
_PART = {"guidance": "new_guidance", "examples": "worked_example", "guardrails": "guardrails"}


def alone(version: StrategyVersion, kind: str) -> dict:
    """What strategy_edit is given to make a version of ``kind`` alone."""
    content = {"new_guidance": "", "worked_example": "", "guardrails": []}
    content[_PART[kind]] = getattr(version, _PART[kind])
    return {**content, "title": f"{version.title or version.strategy.title} ({kind} alone)"}


def revisable(row: dict, kind_rows: Sequence[dict]) -> dict | None:
    """The kind experiment that says a pick not promoted should be revised: one kind alone, of that
    strategy only, said "promote" (the best difference first); None when none did."""
    if row["pattern_kind"] == Strategy.PatternKind.INSIGHTS or row.get("decision") == Experiment.Decision.PROMOTE:
        return None
    said = [
        k
        for k in kind_rows
        if k["family"] == row["family"]
        and k["strategies"] == [row["strategy"]]
        and k.get("decision") == Experiment.Decision.PROMOTE
    ]
    return max(said, key=lambda k: k.get("difference") or 0, default=None)


def insight_lists() -> list[Strategy]:
    """Every failure/success pair of the baseline compared (insights.py compares a bounded number
    a pass, as beat would over several passes), the insight lists proposed or updated."""
    touched: dict[int, Strategy] = {}
    for _ in range(INSIGHT_PASSES):
        updated = insights_update(window_days=settings.STRATEGY_MINING_WINDOW_DAYS)
        if not updated:
            break
        touched.update((s.pk, s) for s in updated)
    return list(touched.values())


def pick(cycle: "Cycle") -> list[dict]:
    """Per family, the proposals a reviewer takes: those that apply to most of its held-out items
    (one that applies to none cannot be measured there), then reviewers_pick's order; and the
    family's insight list, a kind of its own, measured by an experiment of its own."""
    waiting = reviewers_pick(
        list(Strategy.objects.filter(status=Strategy.Status.PROPOSED).exclude(current_version=None))
    )
    taken, picked = set(), []
    for kind in cycle.versions:
        items = cycle.items(kind, DatasetItem.Split.HELD_OUT)
        applies = {
            s.pk: sum(matches(s.current_version.condition, task_kind=i.kind, text=i.text) for i in items)
            for s in waiting
            if s.pk not in taken
        }
        order = sorted(
            (s for s in waiting if applies.get(s.pk)), key=lambda s: -applies[s.pk]
        )  # stable: the pick's order
        lists = [s for s in order if s.pattern_kind == Strategy.PatternKind.INSIGHTS][:1] if cycle.insight_lists else []
        order = [s for s in order if s.pattern_kind != Strategy.PatternKind.INSIGHTS]
        for strategy in order[: cycle.picks] + lists:
            taken.add(strategy.pk)
            row = {
                "family": kind,
                **cycle_report.strategy_row(strategy),
                "applies_to": applies[strategy.pk],
                "held_out": len(items),
            }
            picked.append(row)
            cycle.out(
                f"  {kind}: picked #{strategy.pk} {strategy.title} (applies to {applies[strategy.pk]} of "
                f"{len(items)} held-out items)"
            )
        if not order:
            cycle.out(f"  {kind}: no proposal applies to its held-out items: nothing to test")
    cycle.report["picked"] = picked
    return picked


def picked_versions(picked: list[dict]) -> dict[str, list[StrategyVersion]]:
    versions: dict[str, list[StrategyVersion]] = {}
    for row in picked:
        if row["pattern_kind"] == Strategy.PatternKind.INSIGHTS:
            continue  # measured by its own experiment: its guidance only describes the list
        experiment = Experiment.objects.select_related("strategy_version").get(pk=row["experiment"])
        versions.setdefault(row["family"], []).append(experiment.strategy_version)
    return versions
