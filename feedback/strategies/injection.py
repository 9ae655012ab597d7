"""Which strategies a run gets: every active one that matches its task, and each matching
trial strategy in the arm the run is assigned to. The run records what it got."""

import hashlib
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.core.cache import cache
from django.db import transaction
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from feedback.agent.prompts import build_system_prompt
from feedback.models import AppliedStrategy, Run, Strategy, StrategyVersion

from .conditions import matches


def insights_in_order(insights: list[dict]) -> list[dict]:
    """Best voted first (a stored list is; one edited by hand in the admin may not be)."""
    return sorted((i for i in insights if isinstance(i, dict)), key=lambda i: -int(i.get("votes") or 0))


def trial_arm(strategy_id: int, run_id: int, fraction: float) -> str:
    """Deterministic: the same run and strategy always land in the same arm."""
    position = _position(strategy_id, run_id) / 2**64
    return AppliedStrategy.Arm.TREATMENT if position < fraction else AppliedStrategy.Arm.CONTROL


@dataclass
class Injection:
    guidance: list[str] = field(default_factory=list)
    examples: list[str] = field(default_factory=list)
    # Insight lists' texts, best voted first (feedback/strategies/insights.py).
    insights: list[str] = field(default_factory=list)
    guardrails: list[dict] = field(default_factory=list)
    applied: list[tuple[StrategyVersion, str]] = field(default_factory=list)
    # Another model for this run (an experiment's treatment arm); "" keeps the configured one.
    model: str = ""
    # A whole system prompt written by a person (the playground); "" builds it from the above.
    system_prompt: str = ""

    def system_prompt_text(self) -> str:
        """The system prompt a run with this injection is given."""
        return self.system_prompt or build_system_prompt(self.guidance, self.examples, self.insights)

    def add(self, version: StrategyVersion, arm: str) -> None:
        self.applied.append((version, arm))
        if arm == AppliedStrategy.Arm.CONTROL:
            return
        if version.insights:
            # An insight list is its insights: its guidance only describes them to reviewers.
            self.insights.extend(item["text"] for item in insights_in_order(version.insights))
        elif version.new_guidance.strip():  # a version may act by its guardrails or example alone
            self.guidance.append(version.new_guidance)
        if version.worked_example:
            self.examples.append(version.worked_example)
        self.guardrails.extend(g for g in version.guardrails if isinstance(g, dict))


# What the injection and its record read: every new run selects its strategies, and their
# evidence and other texts are the bulk of the rows.
_INJECTED_FIELDS = (
    "status", "trial_fraction", "current_version__strategy", "current_version__number",
    "current_version__condition", "current_version__new_guidance", "current_version__worked_example",
    "current_version__guardrails", "current_version__insights",
)  # fmt: skip


def select(run: Run, *, exclude: int | None = None) -> Injection:
    """The strategies for a new run (``exclude``: leave one out, to show a prompt without it).

    Every matching active strategy applies. Of the matching strategies on trial, a run takes
    part in one only (chosen deterministically), so two trials never confound each other's
    measurement; that one applies in the treatment arm and is withheld in the control arm.
    An experiment's run takes no trial, and its arm's change (feedback/experiments/arms.py); a
    playground's run, its person's edit (feedback/playground.py).
    """
    injection = Injection()
    # An experiment's or a playground's run compares with what production gets now: no trial.
    experiment = run.purpose != Run.Purpose.PRODUCTION
    trials = []
    for strategy in _live_strategies():
        version = strategy.current_version
        if strategy.pk == exclude or not matches(version.condition, task_kind=run.task_kind, text=run.task.text):
            continue
        if strategy.status == Strategy.Status.ACTIVE:
            injection.add(version, AppliedStrategy.Arm.ACTIVE)
        elif not experiment:
            trials.append(strategy)
    if run.purpose == Run.Purpose.EXPERIMENT:
        from feedback.experiments.arms import add_change

        add_change(injection, run)
    elif run.purpose == Run.Purpose.PLAYGROUND:
        from feedback.playground import add_edit

        add_edit(injection, run)
    if trials:
        strategy = trials[_position(0, run.pk) % len(trials)]
        injection.add(strategy.current_version, trial_arm(strategy.pk, run.pk, strategy.trial_fraction))
    return injection


# Every run starts by selecting its strategies, and they change a few times a day: a process keeps
# the live ones while the shared version key keeps the value it had when they were read. On Redis
# that key is read from memory until it changes (agentsite/cache.py), so a run starts without a
# query for them, and a change made anywhere is seen by the next run everywhere.
LIVE_VERSION_KEY = "strategies:live-version"
_live: tuple[Any, list[Strategy]] | None = None


def _live_strategies() -> list[Strategy]:
    global _live
    version = cache.get(LIVE_VERSION_KEY)
    if version is None:
        # First use, or the cache was emptied: a new version, so no process keeps what it had.
        cache.add(LIVE_VERSION_KEY, uuid.uuid4().hex, timeout=None)
        version = cache.get(LIVE_VERSION_KEY)
    if version is not None and _live is not None and _live[0] == version:
        return _live[1]
    # Read after the version: a change that commits in between bumps it again after the read.
    strategies = list(
        Strategy.objects.filter(status__in=[Strategy.Status.ACTIVE, Strategy.Status.TRIAL])
        .exclude(current_version=None)
        .select_related("current_version")
        .only(*_INJECTED_FIELDS)
        .order_by("pk")
    )
    _live = (version, strategies) if version is not None else None
    return strategies


def strategies_changed() -> None:
    """Make every process read the live strategies again. Called for every save and delete of a
    strategy or a version (below); a ``QuerySet.update()`` of them must call it too."""
    _bump()
    # Again once the change commits: a process that read the strategies in between, before the
    # change was visible, would keep the old ones under the first new version.
    transaction.on_commit(_bump)


def _bump() -> None:
    cache.set(LIVE_VERSION_KEY, uuid.uuid4().hex, timeout=None)


@receiver([post_save, post_delete], sender=Strategy)
@receiver([post_save, post_delete], sender=StrategyVersion)
def _strategy_saved(**kwargs: Any) -> None:
    strategies_changed()


def _position(salt: int, run_id: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{salt}:{run_id}".encode()).digest()[:8], "big")


def recorded(run: Run) -> Injection:
    """What a resumed run got when it started (its strategies may have changed since)."""
    injection = Injection()
    for applied in run.applied_strategies.select_related("strategy_version").order_by("pk"):
        injection.add(applied.strategy_version, applied.arm)
    if run.purpose == Run.Purpose.EXPERIMENT:
        from feedback.experiments.arms import add_change

        add_change(injection, run, resumed=True)
    return injection


def record(run: Run, injection: Injection) -> None:
    AppliedStrategy.objects.bulk_create(
        [AppliedStrategy(run=run, strategy_version=v, arm=arm) for v, arm in injection.applied],
        ignore_conflicts=True,
    )
