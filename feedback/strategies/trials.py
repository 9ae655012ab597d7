"""Controlled trials: what a strategy on trial did to the runs it touched, decided by tests that
stay valid however often they are looked at.

Matching runs are split deterministically between treatment (strategy applied) and control
(withheld) at the strategy's ``trial_fraction`` - see injection.trial_arm. The trial page, the
reviewer and beat's check-trials look at a trial after every run. A fixed-sample test checked
again and again is wrong far more often than it says: with the Welch 95% interval this module
used before, 26% to 31% of trials of a strategy that does nothing ended in "promote" or "roll
back" within 200 runs (tests/test_trial_trust.py measures it).

**The method: a mixture sequential probability ratio test (mSPRT), normal mixture** (Robbins
1970; Johari, Koomen, Pekelis & Walsh, "Always valid inference: continuous monitoring of A/B
tests", Operations Research 2022: the test behind Optimizely's Stats Engine, and the kind of
sequential test Eppo and Statsig offer). For the difference of means d (treatment - control),
estimated variance s² = v_t/n_t + v_c/n_c, and a normal mixture N(0, τ²) over the true
difference θ, the likelihood ratio

    Λ(θ) = sqrt(s² / (s² + τ²)) · exp(τ² (d - θ)² / (2 s² (s² + τ²)))

is a martingale where θ is the truth (asymptotically, with the variance estimated), so by Ville's
inequality it ever reaches 1/α with probability at most α, whenever and however often one looks.
The θ it has not rejected form the always-valid (1 - α) interval

    d ± s · sqrt((1 + s²/τ²) · (2 ln(1/α) + ln(1 + τ²/s²))).

Why this and not a bounded-outcome confidence sequence (empirical Bernstein, betting): scores are
in [0, 1], but three of the counter-metrics (tokens per run, run duration, cost per run) have no bound. One test
for all four metrics is one thing to understand and to check. Its normal approximation needs some
runs: nothing is decided before ``STRATEGY_TRIAL_MIN_SAMPLES`` runs per arm, and the simulation
in the tests measures the result (2% to 3% of no-effect trials ever decide within 200 runs).

τ is set in each metric's own spread, τ² = MIXTURE² (v_t + v_c), so one constant suits scores,
error rates, tokens and seconds: with MIXTURE = 0.4 the interval is tightest, relative to a
fixed-sample one, around 30-100 runs per arm, where score differences of 0.1-0.15 are found. Any
fixed τ keeps the guarantee; it only moves where the test has most power.

**Counter-metrics** (error rate, tokens per run, run duration, cost per run) get the same test; one that is
significantly worse in the treatment - its interval entirely above a tolerance - blocks
promotion. **Sample-ratio mismatch**: the split of assigned runs against the configured fraction,
by the sequential beta-binomial mixture test (the two-arm case of the Dirichlet-multinomial test
of Lindon & Malek, "Anytime-valid inference for multinomial count data", NeurIPS 2022, which
Optimizely uses for its SRM check); a mismatch stops every automatic decision.
"""

import math
from dataclasses import dataclass

from django.conf import settings
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from feedback.metrics.errors import run_had_error
from feedback.models import AppliedStrategy, Run, Strategy

ALPHA = 0.05  # every interval: 95%, always valid
MIXTURE = 0.4  # τ in units of the metric's spread (see the module docstring)
SRM_ALPHA = 0.01  # a fair split is flagged in at most 1% of trials, ever
SRM_PRIOR = 10.0  # the beta mixture's concentration around the configured fraction
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


@dataclass
class Sample:
    """One arm's values of one metric, kept as what the test needs: count, sum, sum of squares."""

    n: int = 0
    total: float = 0.0
    squares: float = 0.0

    def add(self, value: float) -> None:
        self.n += 1
        self.total += value
        self.squares += value * value

    @property
    def mean(self) -> float | None:
        return self.total / self.n if self.n else None

    @property
    def variance(self) -> float | None:
        if self.n < 2:
            return None
        return max(0.0, (self.squares - self.total * self.total / self.n) / (self.n - 1))

    def as_json(self) -> dict:
        return {"n": self.n, "mean": self.mean}


@dataclass(frozen=True)
class Interval:
    """The difference treatment - control and its always-valid interval."""

    difference: float
    low: float
    high: float


def always_valid_interval(treatment: Sample, control: Sample, *, alpha: float = ALPHA) -> Interval | None:
    """The mSPRT interval of the difference of means (None until each arm has two values)."""
    if treatment.n < 2 or control.n < 2:
        return None
    vt, vc = treatment.variance, control.variance
    difference = treatment.mean - control.mean
    s2 = vt / treatment.n + vc / control.n
    if s2 == 0:
        return Interval(difference, difference, difference)  # no spread at all: the difference is exact
    tau2 = MIXTURE**2 * (vt + vc)
    half = math.sqrt(s2 * (1 + s2 / tau2) * (2 * math.log(1 / alpha) + math.log(1 + tau2 / s2)))
    return Interval(difference, difference - half, difference + half)


def runs_to_decision(effect: float, *, var_t: float, var_c: float, fraction: float, minimum: int) -> int | None:
    """Scored runs, both arms together, at which a true difference of ``effect`` typically reaches
    the boundary: the number where the interval's half-width has shrunk to ``|effect|``. As the
    observed difference wanders, about 6 in 10 such trials have decided by then (tested)."""
    if effect == 0:
        return None
    floor = math.ceil(minimum / min(fraction, 1 - fraction))
    spread = var_t / fraction + var_c / (1 - fraction)  # N · s² at N runs in all
    if spread == 0:
        return floor
    u_per_run = MIXTURE**2 * (var_t + var_c) / spread

    def half_width(n: int) -> float:
        u = u_per_run * n
        return math.sqrt(spread / n * (1 + 1 / u) * (2 * math.log(1 / ALPHA) + math.log(1 + u)))

    if half_width(floor) <= abs(effect):
        return floor
    low, high = floor, floor * 2
    while half_width(high) > abs(effect):
        low, high = high, high * 2
        if high > 10**9:
            return None
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if half_width(middle) <= abs(effect) else (middle, high)
    return high


@dataclass(frozen=True)
class Split:
    """The runs assigned to each arm against the configured treatment share."""

    treatment: int
    control: int
    fraction: float
    p_value: float

    @property
    def observed(self) -> float | None:
        total = self.treatment + self.control
        return self.treatment / total if total else None

    @property
    def mismatch(self) -> bool:
        return self.p_value < SRM_ALPHA


def split_test(treatment: int, control: int, fraction: float) -> Split:
    """Sequential SRM test: the beta-binomial mixture's Bayes factor against "each run goes to the
    treatment with probability ``fraction``"; 1/factor is a p-value valid at any look."""
    a, b = SRM_PRIOR * fraction, SRM_PRIOR * (1 - fraction)
    log_factor = (
        _log_beta(a + treatment, b + control) - _log_beta(a, b)
        - treatment * math.log(fraction) - control * math.log(1 - fraction)
    )  # fmt: skip
    return Split(treatment, control, fraction, min(1.0, math.exp(-log_factor)))


def _log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


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
        bounds = {"low": self.interval.low, "high": self.interval.high} if self.interval else {}
        return {"treatment": self.treatment.as_json(), "control": self.control.as_json(), **bounds,
                "tolerance": self.tolerance, "worse": self.worse}  # fmt: skip


@dataclass(frozen=True)
class Outlook:
    """Expected scored runs (both arms) to a decision if the true difference is ``effect``."""

    kind: str  # "observed" or "minimum"
    effect: float
    runs: int | None
    more: int | None


@dataclass(frozen=True)
class TrialStats:
    treatment: Sample  # the scores
    control: Sample
    interval: Interval | None
    recommendation: str  # "promote", "blocked", "roll_back", "no_effect", "check_split", "collect_more"
    guards: tuple[Guard, ...]
    split: Split
    outlook: tuple[Outlook, ...]
    minimum_effect: float
    blockers: tuple[str, ...]  # why promotion is refused, if it is

    @property
    def difference(self) -> float | None:
        if self.interval:
            return self.interval.difference
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

    def as_json(self) -> dict:
        """What a decision records in its audit event."""
        return {
            "method": METHOD,
            "treatment": self.treatment.as_json(),
            "control": self.control.as_json(),
            "difference": self.difference,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "recommendation": self.recommendation,
            "improved": self.improved,
            "harmed": self.harmed,
            "blockers": list(self.blockers),
            "guards": {g.name: g.as_json() for g in self.guards},
            "split": {"treatment": self.split.treatment, "control": self.split.control,
                      "fraction": self.split.fraction, "p_value": self.split.p_value,
                      "mismatch": self.split.mismatch},
        }  # fmt: skip


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


def compare(
    treatment: Sample, control: Sample, *, guards: dict[str, tuple[Sample, Sample]] | None = None,
    split: Split | None = None, fraction: float = 0.5,
) -> TrialStats:  # fmt: skip
    """The trial's statistics from each arm's scores, counter-metrics and assigned runs."""
    minimum = max(2, settings.STRATEGY_TRIAL_MIN_SAMPLES)
    minimum_effect = settings.STRATEGY_TRIAL_MIN_EFFECT
    split = split or split_test(treatment.n, control.n, fraction)
    enough = treatment.n >= minimum and control.n >= minimum
    checked = tuple(
        Guard(name, t, c, always_valid_interval(t, c) if t.n >= minimum and c.n >= minimum else None)
        for name, (t, c) in (guards or {}).items()
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
    interval = always_valid_interval(treatment, control) if enough else None
    recommendation = recommend(
        interval, enough=enough, blocked=bool(blockers), mismatch=split.mismatch, minimum_effect=minimum_effect
    )
    known = treatment.n >= 2 and control.n >= 2
    var_t = treatment.variance if known else ASSUMED_SCORE_SD**2
    var_c = control.variance if known else ASSUMED_SCORE_SD**2
    done = treatment.n + control.n
    effects = [("minimum", minimum_effect)]
    if known and treatment.mean != control.mean:
        effects.insert(0, ("observed", treatment.mean - control.mean))
    outlook = []
    for kind, effect in effects:
        runs = runs_to_decision(effect, var_t=var_t, var_c=var_c, fraction=split.fraction, minimum=minimum)
        outlook.append(Outlook(kind, effect, runs, None if runs is None else max(0, runs - done)))
    return TrialStats(
        treatment, control, interval, recommendation, checked, split, tuple(outlook), minimum_effect, tuple(blockers)
    )


def trial_stats(strategy: Strategy) -> TrialStats:
    """The statistics of a strategy's trial, from the runs assigned to each of its arms."""
    rows = (
        AppliedStrategy.objects.filter(strategy_version__strategy=strategy)
        .exclude(arm=AppliedStrategy.Arm.ACTIVE)
        # The metrics' one definition of an error: a guardrail's or a person's refusal is none.
        .annotate(had_error=run_had_error("run"))
        .values_list("arm", "run__status", "run__score", "had_error", "run__tokens_in", "run__tokens_out",
                     "run__started_at", "run__finished_at", "run__cost")
    )  # fmt: skip
    arms = (AppliedStrategy.Arm.TREATMENT, AppliedStrategy.Arm.CONTROL)
    assigned = dict.fromkeys(arms, 0)
    scores = {arm: Sample() for arm in arms}
    guards = {name: {arm: Sample() for arm in arms} for name in GUARDS}
    finished = (Run.Status.SUCCEEDED, Run.Status.FAILED)
    for arm, status, score, had_error, tokens_in, tokens_out, started, ended, cost in rows.iterator():
        assigned[arm] += 1
        if score is not None:
            scores[arm].add(score)
        if status not in finished:
            continue
        guards["error_rate"][arm].add(float(had_error or status == Run.Status.FAILED))
        guards["tokens"][arm].add(tokens_in + tokens_out)
        if started and ended:
            guards["duration"][arm].add((ended - started).total_seconds())
        if cost is not None:  # an unpriced run has no cost to compare
            guards["cost"][arm].add(cost)
    t, c = arms
    return compare(
        scores[t],
        scores[c],
        guards={name: (by_arm[t], by_arm[c]) for name, by_arm in guards.items()},
        split=split_test(assigned[t], assigned[c], strategy.trial_fraction),
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
            f"Automatic roll-back: treatment scores {stats.difference:+.3f} against control "
            f"(always-valid 95% interval {stats.ci_low:+.3f} to {stats.ci_high:+.3f}, by the {METHOD_NAME}; "
            f"n={stats.treatment.n}/{stats.control.n})."
        )
        try:
            strategy_roll_back(strategy=strategy, reviewer=None, reason=reason, automatic=True, trial=stats.as_json())
        except IllegalTransition:
            continue  # a reviewer decided first
        rolled.append(strategy.pk)
    return rolled
