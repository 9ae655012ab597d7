"""Controlled trials: what a strategy on trial did to the runs it touched, like with like, decided by
tests that stay valid however often they are looked at.

Matching runs are split deterministically between treatment (strategy applied) and control
(withheld) at the strategy's ``trial_fraction`` - see injection.trial_arm. Only production runs
count: experiment and playground runs never enter a trial. The trial page, the reviewer and beat's
check-trials look at a trial after every run, so its interval is the always-valid one of
sequential.py (a mixture sequential probability ratio test, mSPRT), on the **stratified**
difference (strata.py): each task template's runs in one arm against the same template's in the
other, so the difference is what the strategy did, not which tasks each arm happened to get.

**Counter-metrics** (error rate, tokens per run, run duration, cost per run) get the same test,
stratified the same way; one that is significantly worse in the treatment - its interval entirely
above a tolerance - blocks the verdict "promote". **Sample-ratio mismatch**: the split of assigned
runs against the configured fraction (sequential.split_test); a mismatch stops every automatic
decision. Nothing is decided before ``STRATEGY_TRIAL_MIN_SAMPLES`` scored runs per arm and,
compared over several strata, twice as many degrees of freedom within them per arm (runs less
strata): a variance within strata from a handful of runs per template is too unsure for the
normal approximation (tests/test_trial_strata.py measures the result).
"""

from dataclasses import dataclass

from django.conf import settings
from django.db.models import Exists, OuterRef, QuerySet
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from feedback.metrics.errors import ERROR_STEP, GUARDRAIL_REFUSED
from feedback.models import AppliedStrategy, Run, Step, Strategy

from .sequential import (  # noqa: F401 (the trials' statistics, as callers import them)
    ALPHA,
    Interval,
    Sample,
    Split,
    always_valid_interval,
    runs_to_decision,
    split_test,
)
from .strata import ALL_KINDS, OTHER, Leaves, Stratum, interval_of, stratify, task_template, within_variances

METHOD = "mSPRT"
METHOD_NAME = "mixture sequential probability ratio test (mSPRT)"
# Before an arm has two scores, the expected runs assume this spread of scores.
ASSUMED_SCORE_SD = 0.25
# How much worse a counter-metric may be in the treatment before it blocks promotion: error rate
# in absolute terms (any significant rise), tokens and duration relative to the control's mean (a
# strategy adds its guidance to the prompt, so a few more tokens are its expected price).
GUARDS = {
    "error_rate": ("absolute", 0.0),
    "tokens": ("relative", 0.10),
    "duration": ("relative", 0.10),
    "cost": ("relative", 0.10),
}
GUARD_LABELS = {"error_rate": gettext_lazy("error rate"), "tokens": gettext_lazy("tokens per run"),
                "duration": gettext_lazy("run duration (s)"), "cost": gettext_lazy("cost per run (USD)")}  # fmt: skip
# A refusal by a guardrail is a strategy at work, not a failure; a run it derails still fails.
GUARDRAIL_REFUSAL = GUARDRAIL_REFUSED
# The strata a decision's audit record keeps (the largest; the page shows them all).
STRATA_RECORDED = 30


def error_steps(run: OuterRef) -> QuerySet[Step]:
    """The steps that make a run count as having an error: the metrics' one definition
    (feedback/metrics/errors.py: a failed tool call or a model error; a guardrail's or a reviewer's
    refusal is none), so the trials and the alerts count errors as the metrics page does."""
    return Step.objects.filter(ERROR_STEP, run=run)


def _totals(strata: list[Stratum]) -> tuple[Sample, Sample]:
    t, c = Sample(), Sample()
    for stratum in strata:
        t, c = t.merged(stratum.treatment), c.merged(stratum.control)
    return t, c


def _enough(strata: list[Stratum], minimum: int) -> bool:
    """``minimum`` runs in each arm; compared over several strata, twice as many degrees of
    freedom within them in each arm (module docstring)."""
    t, c = _totals(strata)
    compared = [s for s in strata if s.compared]
    if len(compared) <= 1:
        return min(t.n, c.n) >= minimum
    free_t = sum(s.treatment.n for s in compared) - len(compared)
    free_c = sum(s.control.n for s in compared) - len(compared)
    return min(t.n, c.n) >= minimum and min(free_t, free_c) >= 2 * minimum


@dataclass(frozen=True)
class Guard:
    """A counter-metric: lower is better; significantly higher in the treatment blocks promotion."""

    name: str
    treatment: Sample
    control: Sample
    interval: Interval | None

    @property
    def tolerance(self) -> float:
        kind, amount = GUARDS[self.name]
        return amount * (self.control.mean or 0.0) if kind == "relative" else amount

    @property
    def worse(self) -> bool:
        return self.interval is not None and self.interval.low > self.tolerance

    @property
    def label(self) -> str:
        return str(GUARD_LABELS[self.name])

    def as_json(self) -> dict:
        i = self.interval
        bounds = {"difference": i.difference, "low": i.low, "high": i.high} if i else {}
        return {
            "treatment": self.treatment.as_json(),
            "control": self.control.as_json(),
            **bounds,
            "tolerance": self.tolerance,
            "worse": self.worse,
        }


@dataclass(frozen=True)
class Outlook:
    """Expected scored runs (both arms) to a decision if the true difference is ``effect``."""

    kind: str  # "observed" or "minimum"
    effect: float
    runs: int | None
    more: int | None


@dataclass(frozen=True)
class TrialStats:
    treatment: Sample  # the scores, every stratum together
    control: Sample
    interval: Interval | None  # of the stratified difference
    recommendation: str  # "promote", "blocked", "roll_back", "no_effect", "check_split", "collect_more"
    guards: tuple[Guard, ...]
    split: Split
    outlook: tuple[Outlook, ...]
    minimum_effect: float
    blockers: tuple[str, ...]  # why promotion is refused, if it is
    strata: tuple[Stratum, ...] = ()  # of the scores, as compared

    @property
    def difference(self) -> float | None:
        if self.interval:
            return self.interval.difference
        return self.treatment.mean - self.control.mean if self.treatment.n and self.control.n else None

    @property
    def raw_difference(self) -> float | None:
        """The difference of the arms' means, task mix and all (what the page showed before strata)."""
        return self.treatment.mean - self.control.mean if self.treatment.n and self.control.n else None

    @property
    def ci_low(self) -> float | None:
        return self.interval.low if self.interval else None

    @property
    def ci_high(self) -> float | None:
        return self.interval.high if self.interval else None

    @property
    def improved(self) -> bool:
        return self.recommendation in ("promote", "blocked")

    @property
    def harmed(self) -> bool:
        return self.interval is not None and self.interval.high < 0

    @property
    def compared_strata(self) -> int:
        return sum(s.compared for s in self.strata)

    def as_json(self) -> dict:
        """The figures a decision is taken on, frozen into its audit event."""
        largest = sorted(self.strata, key=lambda s: -(s.treatment.n + s.control.n))[:STRATA_RECORDED]
        return {
            "method": METHOD,
            "stratified": True,
            "treatment": self.treatment.as_json(),
            "control": self.control.as_json(),
            "difference": self.difference,
            "raw_difference": self.raw_difference,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "recommendation": self.recommendation,
            "improved": self.improved,
            "harmed": self.harmed,
            "blockers": list(self.blockers),
            "guards": {g.name: g.as_json() for g in self.guards},
            "split": self.split.as_json(),
            "strata": [s.as_json() for s in largest],
            "strata_count": len(self.strata),
        }


def recommend(interval: Interval | None, *, enough: bool, blocked: bool, mismatch: bool, minimum_effect: float) -> str:
    """The decision rule, at any look."""
    if not enough or interval is None:
        return "collect_more"
    if mismatch:
        return "check_split"  # the arms are not what they should be: no verdict is trustworthy
    if interval.high < 0:
        return "roll_back"
    if interval.low > 0:
        return "blocked" if blocked else "promote"
    if -minimum_effect < interval.low and interval.high < minimum_effect:
        return "no_effect"  # whatever the effect, it is smaller than the smallest worth having
    return "collect_more"


def decide(scores: list[Stratum], *, blocked: bool = False, mismatch: bool = False) -> tuple[Interval | None, str]:
    """The interval of the scores' stratified difference and the recommendation, at any look
    (what the trial page, beat and the simulations in the tests all decide by)."""
    enough = _enough(scores, max(2, settings.STRATEGY_TRIAL_MIN_SAMPLES))
    interval = interval_of(scores) if enough else None
    minimum_effect = settings.STRATEGY_TRIAL_MIN_EFFECT
    return interval, recommend(
        interval, enough=enough, blocked=blocked, mismatch=mismatch, minimum_effect=minimum_effect
    )


def compare(
    treatment: Sample, control: Sample, *, guards: dict[str, tuple[Sample, Sample]] | None = None,
    split: Split | None = None, fraction: float = 0.5,
) -> TrialStats:  # fmt: skip
    """The trial's statistics from each arm's values taken as one stratum (no task mix)."""

    def one(t: Sample, c: Sample) -> list[Stratum]:
        return [Stratum(ALL_KINDS, OTHER, t, c)]

    return compare_strata(
        one(treatment, control),
        guards={name: one(t, c) for name, (t, c) in (guards or {}).items()},
        split=split or split_test(treatment.n, control.n, fraction),
    )


def compare_strata(scores: list[Stratum], *, guards: dict[str, list[Stratum]], split: Split) -> TrialStats:
    """The trial's statistics from the strata of its scores and of each counter-metric."""
    minimum = max(2, settings.STRATEGY_TRIAL_MIN_SAMPLES)
    minimum_effect = settings.STRATEGY_TRIAL_MIN_EFFECT
    treatment, control = _totals(scores)
    checked = tuple(
        Guard(name, *_totals(strata), interval_of(strata) if _enough(strata, minimum) else None)
        for name, strata in guards.items()
    )
    blockers = [
        _("%(metric)s is significantly worse in the treatment (%(low)s to %(high)s, tolerance %(tolerance)s)")
        % {"metric": g.label, "low": f"{g.interval.low:+.3g}", "high": f"{g.interval.high:+.3g}",
           "tolerance": f"{g.tolerance:.3g}"}
        for g in checked if g.worse
    ]  # fmt: skip
    if split.mismatch:
        blockers.append(_("the split of runs does not match the configured treatment share"))
    # Before the minimum the normal approximation is not to be trusted: no interval at all.
    interval, recommendation = decide(scores, blocked=bool(blockers), mismatch=split.mismatch)
    within = within_variances(scores)
    var_t, var_c = within if within else (ASSUMED_SCORE_SD**2, ASSUMED_SCORE_SD**2)
    done = treatment.n + control.n
    effects = [("minimum", minimum_effect)]
    observed = interval.difference if interval else None
    if within and observed:
        effects.insert(0, ("observed", observed))
    outlook = []
    for kind, effect in effects:
        runs = runs_to_decision(effect, var_t=var_t, var_c=var_c, fraction=split.fraction, minimum=minimum)
        outlook.append(Outlook(kind, effect, runs, None if runs is None else max(0, runs - done)))
    return TrialStats(
        treatment,
        control,
        interval,
        recommendation,
        checked,
        split,
        tuple(outlook),
        minimum_effect,
        tuple(blockers),
        tuple(scores),
    )


def trial_stats(strategy: Strategy) -> TrialStats:
    """The statistics of a strategy's trial, from the production runs assigned to each arm."""
    rows = (
        AppliedStrategy.objects.filter(strategy_version__strategy=strategy, run__purpose=Run.Purpose.PRODUCTION)
        .exclude(arm=AppliedStrategy.Arm.ACTIVE)
        .annotate(had_error=Exists(error_steps(OuterRef("run"))))
        # In the runs' order, so the strata are listed as their first runs came, on any database.
        .order_by("run_id")
        .values_list("arm", "run__status", "run__score", "had_error", "run__tokens_in", "run__tokens_out",
                     "run__started_at", "run__finished_at", "run__cost", "run__task_kind", "run__task__text")
    )  # fmt: skip
    treatment = AppliedStrategy.Arm.TREATMENT
    assigned = {AppliedStrategy.Arm.TREATMENT: 0, AppliedStrategy.Arm.CONTROL: 0}
    scores: Leaves = {}
    guards: dict[str, Leaves] = {name: {} for name in GUARDS}

    def add(leaves: Leaves, key: tuple[str, str], arm: str, value: float) -> None:
        pair = leaves.setdefault(key, (Sample(), Sample()))
        pair[0 if arm == treatment else 1].add(value)

    finished = (Run.Status.SUCCEEDED, Run.Status.FAILED)
    for arm, status, score, had_error, tokens_in, tokens_out, started, ended, cost, kind, text in rows.iterator():
        assigned[arm] += 1
        key = (kind, task_template(text))
        if score is not None:
            add(scores, key, arm, score)
        if status not in finished:
            continue
        add(guards["error_rate"], key, arm, float(had_error or status == Run.Status.FAILED))
        add(guards["tokens"], key, arm, tokens_in + tokens_out)
        if started and ended:
            add(guards["duration"], key, arm, (ended - started).total_seconds())
        if cost is not None:  # an unpriced run has no cost to compare
            add(guards["cost"], key, arm, cost)
    return compare_strata(
        stratify(scores),
        guards={name: stratify(leaves) for name, leaves in guards.items()},
        split=split_test(assigned[treatment], assigned[AppliedStrategy.Arm.CONTROL], strategy.trial_fraction),
    )


def check_trials() -> list[int]:
    """Roll back, automatically and logged, every trial whose scores are significantly worse by
    the always-valid test (never while its split is mismatched)."""
    from .services import IllegalTransition, strategy_roll_back

    rolled = []
    for strategy in Strategy.objects.filter(status=Strategy.Status.TRIAL):
        stats = trial_stats(strategy)
        if stats.recommendation != "roll_back":
            continue
        reason = (
            f"Automatic roll-back: treatment scores {stats.difference:+.3f} against control, like with like "
            f"over {stats.compared_strata} task stratum(s) (always-valid 95% interval {stats.ci_low:+.3f} to "
            f"{stats.ci_high:+.3f}, by the {METHOD_NAME}; n={stats.treatment.n}/{stats.control.n})."
        )
        try:
            strategy_roll_back(strategy=strategy, reviewer=None, reason=reason, automatic=True, trial=stats.as_json())
        except IllegalTransition:
            continue  # a reviewer decided first
        rolled.append(strategy.pk)
    return rolled
