"""Controlled trials: what a strategy on trial did to the scores of the runs it touched.

Matching runs are split deterministically between treatment (strategy applied) and control
(withheld) - see injection.trial_arm. The effect is the difference of mean scores, treatment
minus control, with a Welch 95% confidence interval (unequal variances, Welch-Satterthwaite
degrees of freedom). Significant means the interval excludes zero.
"""

import math
from dataclasses import asdict, dataclass
from statistics import NormalDist, fmean, variance

from django.conf import settings
from django.db.models import Exists, OuterRef

from feedback.models import AppliedStrategy, Run, Step, Strategy

_Z = NormalDist()


def t_quantile(p: float, df: float) -> float:
    """Student t quantile by the Cornish-Fisher expansion (error < 1e-3 for df >= 5)."""
    z = _Z.inv_cdf(p)
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    g4 = (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160
    return z + g1 / df + g2 / df**2 + g3 / df**3 + g4 / df**4


@dataclass(frozen=True)
class Arm:
    n: int
    mean: float | None
    error_rate: float | None


@dataclass(frozen=True)
class TrialStats:
    treatment: Arm
    control: Arm
    difference: float | None
    ci_low: float | None
    ci_high: float | None
    recommendation: str  # "promote", "roll_back", "no_effect", "collect_more"

    @property
    def improved(self) -> bool:
        return self.ci_low is not None and self.ci_low > 0

    @property
    def harmed(self) -> bool:
        return self.ci_high is not None and self.ci_high < 0

    def as_json(self) -> dict:
        return {**asdict(self), "improved": self.improved, "harmed": self.harmed}


def welch(treatment: list[float], control: list[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """Difference of means and its Welch confidence interval."""
    mt, mc = fmean(treatment), fmean(control)
    vt, vc = variance(treatment) / len(treatment), variance(control) / len(control)
    diff = mt - mc
    se = math.sqrt(vt + vc)
    if se == 0:
        return diff, diff, diff
    df = (vt + vc) ** 2 / (vt**2 / (len(treatment) - 1) + vc**2 / (len(control) - 1))
    half = t_quantile(1 - (1 - confidence) / 2, df) * se
    return diff, diff - half, diff + half


def compare(treatment: list[float], control: list[float], *, errors_t: int = 0, errors_c: int = 0) -> TrialStats:
    minimum = settings.STRATEGY_TRIAL_MIN_SAMPLES
    arm_t = Arm(
        len(treatment), fmean(treatment) if treatment else None, errors_t / len(treatment) if treatment else None
    )
    arm_c = Arm(len(control), fmean(control) if control else None, errors_c / len(control) if control else None)
    if len(treatment) < max(2, minimum) or len(control) < max(2, minimum):
        diff = arm_t.mean - arm_c.mean if treatment and control else None
        return TrialStats(arm_t, arm_c, diff, None, None, "collect_more")
    diff, low, high = welch(treatment, control)
    if low > 0:
        recommendation = "promote"
    elif high < 0:
        recommendation = "roll_back"
    else:
        recommendation = "no_effect"
    return TrialStats(arm_t, arm_c, diff, low, high, recommendation)


def trial_stats(strategy: Strategy) -> TrialStats:
    """The statistics of a strategy's trial, from the scored runs of each arm."""
    failed_call = Step.objects.filter(run=OuterRef("run"), kind=Step.Kind.TOOL_CALL, success=False)
    rows = (
        AppliedStrategy.objects.filter(strategy_version__strategy=strategy, run__score__isnull=False)
        .exclude(arm=AppliedStrategy.Arm.ACTIVE)
        .annotate(had_error=Exists(failed_call))
        .values_list("arm", "run__score", "run__status", "had_error")
    )
    scores = {AppliedStrategy.Arm.TREATMENT: [], AppliedStrategy.Arm.CONTROL: []}
    errors = {AppliedStrategy.Arm.TREATMENT: 0, AppliedStrategy.Arm.CONTROL: 0}
    for arm, score, status, had_error in rows.iterator():
        scores[arm].append(score)
        errors[arm] += bool(had_error or status == Run.Status.FAILED)
    return compare(
        scores[AppliedStrategy.Arm.TREATMENT],
        scores[AppliedStrategy.Arm.CONTROL],
        errors_t=errors[AppliedStrategy.Arm.TREATMENT],
        errors_c=errors[AppliedStrategy.Arm.CONTROL],
    )


def check_trials() -> list[int]:
    """Roll back, automatically and logged, every trial that significantly hurts scores."""
    from .services import IllegalTransition, strategy_roll_back

    rolled = []
    for strategy in Strategy.objects.filter(status=Strategy.Status.TRIAL):
        stats = trial_stats(strategy)
        if not stats.harmed:
            continue
        reason = (
            f"Automatic roll-back: treatment scores {stats.difference:+.3f} against control "
            f"(95% CI {stats.ci_low:+.3f} to {stats.ci_high:+.3f}; n={stats.treatment.n}/{stats.control.n})."
        )
        try:
            strategy_roll_back(strategy=strategy, reviewer=None, reason=reason, automatic=True, trial=stats.as_json())
        except IllegalTransition:
            continue  # a reviewer decided first
        rolled.append(strategy.pk)
    return rolled
