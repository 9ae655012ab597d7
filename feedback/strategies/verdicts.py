"""The verdict a promotion follows: the trial's, or the paired experiment's before a trial.

Safe promotion (issue 23.4): a strategy is promoted only when the verdict of the test it is in
says "promote"; anything else needs the reviewer's explicit override, a distinct, audited action.
The verdict is the latest stage's that has evidence: once a strategy's trial has runs, its
trial's (live traffic, the later and stronger evidence; an experiment's "promote" does not outvote
a trial still collecting runs); before that (not yet on trial, or approved for trial but reached
by no run yet), its paired experiment's. So a strategy whose experiment said "promote" on a
dataset's held-out items may be approved and promoted on that verdict at once (the learning
cycle, strategies/cycle.py), and the first run its trial takes hands the verdict to the trial.
"""

from dataclasses import dataclass, field

from django.utils.translation import gettext_lazy as _

from feedback.models import Strategy

from .trials import TrialStats, trial_stats

# The trial's recommendations, in words (the same words as the trial page).
RECOMMENDATIONS = {
    "promote": _("promote"),
    "blocked": _("better, but promotion is blocked"),
    "roll_back": _("roll back: significantly worse"),
    "no_effect": _("no effect worth having"),
    "check_split": _("none: the split of runs is mismatched"),
    "collect_more": _("collect more runs"),
    "no_verdict": _("no test has run"),
}


@dataclass(frozen=True)
class Verdict:
    """What a test says of a strategy: its ``source`` ("trial", "experiment" or "none"), its
    recommendation (RECOMMENDATIONS' keys), the reasons promotion is blocked and the figures."""

    source: str
    recommendation: str
    blockers: tuple[str, ...] = ()
    figures: dict = field(default_factory=dict)

    @property
    def promotes(self) -> bool:
        return self.recommendation == "promote"

    @property
    def harmful(self) -> bool:
        """Significantly worse: no override promotes that."""
        return self.recommendation == "roll_back"

    @property
    def label(self) -> str:
        return str(RECOMMENDATIONS.get(self.recommendation, self.recommendation))

    def as_json(self) -> dict:
        return {"source": self.source, "recommendation": self.recommendation, "blockers": list(self.blockers)}


# A paired experiment's decision in the trial's words: "reject" is significant harm.
_EXPERIMENT_RECOMMENDATIONS = {"promote": "promote", "reject": "roll_back", "undecided": "collect_more"}


def experiment_verdict(strategy: Strategy) -> Verdict | None:
    """The verdict of the latest paired experiment of the strategy's current version
    (feedback/experiments/): while it runs, "collect more"; once ended, its frozen decision. None
    when it has had none: an earlier version's verdict is not this one's (a revised strategy)."""
    experiment = (
        strategy.experiments.filter(strategy_version_id=strategy.current_version_id)
        .order_by("-created_at", "-pk")
        .first()
    )
    if experiment is None:
        return None
    if experiment.running:
        return Verdict("experiment", "collect_more", figures={"experiment": experiment.pk, "running": True})
    figures = {"experiment": experiment.pk, **experiment.verdict}
    return Verdict("experiment", _EXPERIMENT_RECOMMENDATIONS.get(experiment.decision, "collect_more"), figures=figures)


def promotion_verdict(strategy: Strategy, *, stats: TrialStats | None = None) -> Verdict:
    """The verdict promoting ``strategy`` now would follow (module docstring); ``stats``: its
    trial's statistics when the caller has them already."""
    if strategy.status == Strategy.Status.TRIAL or strategy.trial_started_at:
        stats = stats or trial_stats(strategy)
        if strategy.status == Strategy.Status.TRIAL and not stats.split.treatment + stats.split.control:
            earlier = experiment_verdict(strategy)
            if earlier is not None:
                return earlier  # no trial run yet: the experiment is the only evidence
        return Verdict("trial", stats.recommendation, stats.blockers, stats.as_json())
    return experiment_verdict(strategy) or Verdict("none", "no_verdict")
