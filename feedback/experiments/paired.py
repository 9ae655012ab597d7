"""The paired sequential test of an experiment: per-item differences, valid at every look.

Each item of a dataset runs in both arms; its difference (treatment - control, in [-1, 1]: the
checker's pass/fail or score) removes the item's own difficulty, which on a mix of easy and hard
items is most of the spread. The test is the trials' mSPRT (strategies/sequential.py), as a
one-sample test on the differences: d = their mean, s² = their variance / n, τ² = MIXTURE² · that
variance. One method for trials and experiments, with the same guarantee (Ville's inequality:
at most ALPHA false decisions however often one looks). Nothing is decided before MIN_PAIRS.
Pure Python, no Django: the simulations in tests/test_experiments_simulation.py measure it.
"""

from collections.abc import Iterable
from dataclasses import dataclass

from feedback.strategies.sequential import ALPHA, MIXTURE, Interval, Sample, half_width

MIN_PAIRS = 10  # the normal approximation needs some pairs (as trials need runs per arm)


@dataclass(frozen=True)
class PairedVerdict:
    """promote / reject / continue, with the figures it was decided on."""

    decision: str
    pairs: int
    wins: int
    losses: int
    ties: int
    interval: Interval | None

    @property
    def mean_difference(self) -> float | None:
        return self.interval.difference if self.interval else None

    def as_json(self) -> dict:
        figures = {"decision": self.decision, "pairs": self.pairs, "wins": self.wins,
                   "losses": self.losses, "ties": self.ties}  # fmt: skip
        if self.interval:
            figures |= {"difference": self.interval.difference, "low": self.interval.low, "high": self.interval.high}
        return figures


def paired_interval(differences: Sample, *, alpha: float = ALPHA) -> Interval | None:
    """The always-valid interval of the mean difference; None before two differences."""
    variance = differences.variance
    if variance is None:
        return None
    mean = differences.mean
    if variance == 0:
        return Interval(mean, mean, mean)  # every difference equal: nothing left to estimate
    half = half_width(variance / differences.n, MIXTURE**2 * variance, alpha=alpha)
    return Interval(mean, mean - half, mean + half)


def paired_verdict(differences: Iterable[float], *, alpha: float = ALPHA, minimum: int = MIN_PAIRS) -> PairedVerdict:
    """The verdict on per-item differences (treatment - control) seen so far."""
    sample, wins, losses, ties = Sample(), 0, 0, 0
    for d in differences:
        if not -1.0 <= d <= 1.0:
            raise ValueError(f"a difference must be in [-1, 1], not {d}")
        sample.add(d)
        wins, losses, ties = wins + (d > 0), losses + (d < 0), ties + (d == 0)
    interval = paired_interval(sample, alpha=alpha)
    decision = "continue"
    if interval is not None and sample.n >= minimum and interval.low != interval.high:
        decision = "promote" if interval.low > 0 else "reject" if interval.high < 0 else "continue"
    return PairedVerdict(decision, sample.n, wins, losses, ties, interval)
