"""Always-valid sequential tests: intervals and p-values that stay right however often one looks.

A trial (trials.py) and an active strategy's watch (watch.py) are looked at after every run. A
fixed-sample test checked again and again is wrong far more often than it says: with the Welch 95%
interval trials used before, 26% to 31% of trials of a strategy that does nothing ended in
"promote" or "roll back" within 200 runs (tests/test_trial_trust.py measures it).

**The method: a mixture sequential probability ratio test (mSPRT), normal mixture** (Robbins
1970; Johari, Koomen, Pekelis & Walsh, "Always valid inference: continuous monitoring of A/B
tests", Operations Research 2022: the test behind Optimizely's Stats Engine, and the kind of
sequential test Eppo and Statsig offer). For an estimate d of the difference of means (treatment
- control) with estimated variance s², and a normal mixture N(0, τ²) over the true difference θ,
the likelihood ratio

    Λ(θ) = sqrt(s² / (s² + τ²)) · exp(τ² (d - θ)² / (2 s² (s² + τ²)))

is a martingale where θ is the truth (asymptotically, with the variance estimated), so by Ville's
inequality it ever reaches 1/α with probability at most α, whenever and however often one looks.
The θ it has not rejected form the always-valid (1 - α) interval

    d ± s · sqrt((1 + s²/τ²) · (2 ln(1/α) + ln(1 + τ²/s²))).

The test needs only d and s², so any estimate that is asymptotically normal plugs in: the plain
difference of the arms' means (s² = v_t/n_t + v_c/n_c), or the **stratified** difference that
compares like with like (``stratified_interval``): within each stratum (a task kind and task
template, strata.py) the arms' mean difference, weighted by the stratum's share of the runs,

    d = Σ w_h (ȳ_t,h - ȳ_c,h),   s² = Σ w_h² (v_t/n_t,h + v_c/n_c,h),

with v_t and v_c the arms' variances *within* strata, pooled over them, and s² multiplied by
1 + (H - 1)/df (H strata, df the degrees of freedom within them: a small-sample correction, see
``stratified_interval``). The arm difference no
longer carries which tasks each arm happened to get, and s² loses the spread between tasks, which
on a mix of easy and hard tasks is most of it (post-stratification; CUPED with the stratum as its
covariate, estimated within the trial, so a template with no history needs none). With a single
stratum it is exactly the plain test.

Why this and not a bounded-outcome confidence sequence (empirical Bernstein, betting): scores are
in [0, 1], but three of the counter-metrics (tokens per run, run duration, cost per run) have no
bound. One test for every metric is one thing to understand and to check. Its normal
approximation needs some runs: callers decide nothing before ``STRATEGY_TRIAL_MIN_SAMPLES`` runs
per arm, and the simulations in the tests measure the result.

τ is set in each metric's own spread, τ² = MIXTURE² (v_t + v_c), so one constant suits scores,
error rates, tokens and seconds: with MIXTURE = 0.4 the interval is tightest, relative to a
fixed-sample one, around 30-100 runs per arm, where score differences of 0.1-0.15 are found. Any
fixed τ keeps the guarantee; it only moves where the test has most power.

**Sample-ratio mismatch**: the split of assigned runs against the configured fraction, by the
sequential beta-binomial mixture test (the two-arm case of the Dirichlet-multinomial test of
Lindon & Malek, "Anytime-valid inference for multinomial count data", NeurIPS 2022, which
Optimizely uses for its SRM check).
"""

import math
from collections.abc import Iterable
from dataclasses import dataclass

ALPHA = 0.05  # every interval: 95%, always valid
MIXTURE = 0.4  # τ in units of the metric's spread (see the module docstring)
SRM_ALPHA = 0.01  # a fair split is flagged in at most 1% of trials, ever
SRM_PRIOR = 10.0  # the beta mixture's concentration around the configured fraction
ROUNDING = 1e-9  # below this, relative to the values, a spread or a difference is rounding error


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

    def merged(self, other: "Sample") -> "Sample":
        return Sample(self.n + other.n, self.total + other.total, self.squares + other.squares)

    @property
    def mean(self) -> float | None:
        return self.total / self.n if self.n else None

    @property
    def spread(self) -> float:
        """The sum of squared deviations from the mean; values all equal give 0 exactly, not the
        rounding error of the sums (which would read as a spread, however tiny)."""
        if not self.n:
            return 0.0
        spread = self.squares - self.total * self.total / self.n
        return spread if spread > ROUNDING * max(1.0, self.squares) else 0.0

    @property
    def variance(self) -> float | None:
        return self.spread / (self.n - 1) if self.n >= 2 else None

    def as_json(self) -> dict:
        return {"n": self.n, "mean": self.mean}


@dataclass(frozen=True)
class Interval:
    """The difference treatment - control and its always-valid interval."""

    difference: float
    low: float
    high: float


def half_width(s2: float, tau2: float, *, alpha: float = ALPHA) -> float:
    """The mSPRT interval's half-width for an estimate of variance ``s2`` (see the docstring)."""
    return math.sqrt(s2 * (1 + s2 / tau2) * (2 * math.log(1 / alpha) + math.log(1 + tau2 / s2)))


def pooled_variances(strata: Iterable[tuple[Sample, Sample]]) -> tuple[float, float] | None:
    """Each arm's variance within strata, pooled over the strata with values in both arms; None
    until each arm has two values and a degree of freedom within strata."""
    pairs = [(t, c) for t, c in strata if t.n and c.n]
    n_t, n_c = sum(t.n for t, _ in pairs), sum(c.n for _, c in pairs)
    free_t, free_c = n_t - len(pairs), n_c - len(pairs)
    if n_t < 2 or n_c < 2 or free_t < 1 or free_c < 1:
        return None
    return sum(t.spread for t, _ in pairs) / free_t, sum(c.spread for _, c in pairs) / free_c


def stratified_interval(strata: Iterable[tuple[Sample, Sample]], *, alpha: float = ALPHA) -> Interval | None:
    """The mSPRT interval of the stratified difference of means over ``(treatment, control)``
    pairs, one per stratum (a stratum without a value in both arms is left out: it compares
    nothing). None until each arm has two values in all and a spread within strata to estimate."""
    pairs = [(t, c) for t, c in strata if t.n and c.n]
    variances = pooled_variances(pairs)
    if variances is None:
        return None
    vt, vc = variances
    total = sum(t.n + c.n for t, c in pairs)
    difference = s2 = 0.0
    for t, c in pairs:
        weight = (t.n + c.n) / total
        difference += weight * (t.mean - c.mean)
        s2 += weight * weight * (vt / t.n + vc / c.n)
    if abs(difference) < ROUNDING:
        difference = 0.0  # equal means, summed in another order, differ by a rounding error only
    if s2 == 0:
        return Interval(difference, difference, difference)  # no spread at all: the difference is exact
    # Each stratum's mean is estimated too: with few runs per stratum the variance within strata
    # comes out small (by 20% at 60 runs over 8 tasks, by 48% over 30 tasks, in the tests'
    # simulations). This factor matches both, and is 1 for one stratum and as runs accumulate.
    free = min(sum(t.n for t, _ in pairs), sum(c.n for _, c in pairs)) - len(pairs)
    s2 *= 1 + (len(pairs) - 1) / free
    half = half_width(s2, MIXTURE**2 * (vt + vc), alpha=alpha)
    return Interval(difference, difference - half, difference + half)


def always_valid_interval(treatment: Sample, control: Sample, *, alpha: float = ALPHA) -> Interval | None:
    """The mSPRT interval of the plain difference of means (None until each arm has two values)."""
    return stratified_interval([(treatment, control)], alpha=alpha)


def runs_to_decision(effect: float, *, var_t: float, var_c: float, fraction: float, minimum: int) -> int | None:
    """Scored runs, both arms together, at which a true difference of ``effect`` typically reaches
    the boundary: the number where the interval's half-width has shrunk to ``|effect|``. As the
    observed difference wanders, about 6 in 10 such trials have decided by then (tested). With the
    variances within strata, it is the stratified test's figure (runs spread over strata in
    proportion)."""
    if effect == 0:
        return None
    floor = math.ceil(minimum / min(fraction, 1 - fraction))
    spread = var_t / fraction + var_c / (1 - fraction)  # N · s² at N runs in all
    if spread == 0:
        return floor
    tau2 = MIXTURE**2 * (var_t + var_c)

    def width(n: int) -> float:
        return half_width(spread / n, tau2)

    if width(floor) <= abs(effect):
        return floor
    low, high = floor, floor * 2
    while width(high) > abs(effect):
        low, high = high, high * 2
        if high > 10**9:
            return None
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if width(middle) <= abs(effect) else (middle, high)
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

    def as_json(self) -> dict:
        return {
            "treatment": self.treatment,
            "control": self.control,
            "fraction": self.fraction,
            "p_value": self.p_value,
            "mismatch": self.mismatch,
        }


def split_test(treatment: int, control: int, fraction: float) -> Split:
    """Sequential SRM test: the beta-binomial mixture's Bayes factor against "each run goes to the
    treatment with probability ``fraction``"; 1/factor is a p-value valid at any look."""
    a, b = SRM_PRIOR * fraction, SRM_PRIOR * (1 - fraction)
    log_factor = (
        _log_beta(a + treatment, b + control)
        - _log_beta(a, b)
        - treatment * math.log(fraction)
        - control * math.log(1 - fraction)
    )
    return Split(treatment, control, fraction, min(1.0, math.exp(-log_factor)))


def _log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)
