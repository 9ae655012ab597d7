"""Which strategies a run gets: every active one that matches its task, and each matching
trial strategy in the arm the run is assigned to. The run records what it got."""

import hashlib
from dataclasses import dataclass, field

from feedback.models import AppliedStrategy, Run, Strategy, StrategyVersion

from .conditions import matches


def trial_arm(strategy_id: int, run_id: int, fraction: float) -> str:
    """Deterministic: the same run and strategy always land in the same arm."""
    position = _position(strategy_id, run_id) / 2**64
    return AppliedStrategy.Arm.TREATMENT if position < fraction else AppliedStrategy.Arm.CONTROL


@dataclass
class Injection:
    guidance: list[str] = field(default_factory=list)
    examples: list[str] = field(default_factory=list)
    guardrails: list[dict] = field(default_factory=list)
    applied: list[tuple[StrategyVersion, str]] = field(default_factory=list)

    def add(self, version: StrategyVersion, arm: str) -> None:
        self.applied.append((version, arm))
        if arm == AppliedStrategy.Arm.CONTROL:
            return
        self.guidance.append(version.new_guidance)
        if version.worked_example:
            self.examples.append(version.worked_example)
        self.guardrails.extend(g for g in version.guardrails if isinstance(g, dict))


# What the injection and its record read: every new run selects its strategies, and their
# evidence and other texts are the bulk of the rows.
_INJECTED_FIELDS = (
    "status", "trial_fraction", "current_version__strategy", "current_version__number",
    "current_version__condition", "current_version__new_guidance", "current_version__worked_example",
    "current_version__guardrails",
)  # fmt: skip


def select(run: Run, *, exclude: int | None = None) -> Injection:
    """The strategies for a new run (``exclude``: leave one out, to show a prompt without it).

    Every matching active strategy applies. Of the matching strategies on trial, a run takes
    part in one only (chosen deterministically), so two trials never confound each other's
    measurement; that one applies in the treatment arm and is withheld in the control arm.
    """
    injection = Injection()
    live = (
        Strategy.objects.filter(status__in=[Strategy.Status.ACTIVE, Strategy.Status.TRIAL])
        .exclude(current_version=None)
        .select_related("current_version")
        .only(*_INJECTED_FIELDS)
        .order_by("pk")
    )
    trials = []
    for strategy in live:
        version = strategy.current_version
        if strategy.pk == exclude or not matches(version.condition, task_kind=run.task_kind, text=run.task.text):
            continue
        if strategy.status == Strategy.Status.ACTIVE:
            injection.add(version, AppliedStrategy.Arm.ACTIVE)
        else:
            trials.append(strategy)
    if trials:
        strategy = trials[_position(0, run.pk) % len(trials)]
        injection.add(strategy.current_version, trial_arm(strategy.pk, run.pk, strategy.trial_fraction))
    return injection


def _position(salt: int, run_id: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{salt}:{run_id}".encode()).digest()[:8], "big")


def recorded(run: Run) -> Injection:
    """What a resumed run got when it started (its strategies may have changed since)."""
    injection = Injection()
    for applied in run.applied_strategies.select_related("strategy_version").order_by("pk"):
        injection.add(applied.strategy_version, applied.arm)
    return injection


def record(run: Run, injection: Injection) -> None:
    AppliedStrategy.objects.bulk_create(
        [AppliedStrategy(run=run, strategy_version=v, arm=arm) for v, arm in injection.applied],
        ignore_conflicts=True,
    )
