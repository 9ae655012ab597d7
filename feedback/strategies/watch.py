"""An active strategy, watched against its pre-promotion baseline.

A promotion is a decision on the runs of a trial; what the strategy then does to every matching
run is watched. The runs it was applied to since its promotion are compared, like with like
(the trial's strata: task kind and template), with the runs of its trial before promotion:

- **score** and **accomplished** (the share of runs with a known outcome that accomplished their
  task) against the trial's control arm, the same tasks without the strategy: worse is harm;
- **answers quoting a guardrail** (a final answer carrying a guardrail's internal wording, which
  is never meant for a user) against the control arm: more is harm;
- **guardrail refusals** (runs with a refused tool call) against the trial's treatment arm, the
  strategy at work as it was when promoted: a guardrail refuses by design, so only more refusals
  than on trial are harm.

Each by the always-valid stratified test (sequential.py), at α/4 each so that a strategy that
does no harm raises the alarm, ever, in at most 5% of cases over the four. Nothing is judged
before ``STRATEGY_TRIAL_MIN_SAMPLES`` runs on each side. Only production runs count.
"""

from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db.models import BooleanField, Exists, ExpressionWrapper, OuterRef, Q
from django.utils.translation import gettext_lazy as _

from feedback.models import AppliedStrategy, Run, Step, Strategy

from .sequential import ALPHA, Interval, Sample
from .strata import Leaves, interval_of, stratify, task_template
from .trials import GUARDRAIL_REFUSAL

# What a guardrail's message starts with (feedback/agent/guardrails.py): words for the model,
# never for a user's answer.
GUARDRAIL_TEXT = "Guardrail:"
# name: (label, lower is worse, the trial arm it is compared with)
WATCHED = {
    "score": (_("score"), True, AppliedStrategy.Arm.CONTROL),
    "accomplished": (_("accomplished rate"), True, AppliedStrategy.Arm.CONTROL),
    "guardrail_text": (_("answers quoting a guardrail"), False, AppliedStrategy.Arm.CONTROL),
    "refusals": (_("runs with a guardrail refusal"), False, AppliedStrategy.Arm.TREATMENT),
}
WATCH_ALPHA = ALPHA / len(WATCHED)


@dataclass(frozen=True)
class Watched:
    """One figure: the runs since promotion against the baseline arm."""

    name: str
    active: Sample
    baseline: Sample
    interval: Interval | None  # active - baseline, like with like

    @property
    def label(self) -> str:
        return str(WATCHED[self.name][0])

    @property
    def baseline_arm(self) -> str:
        return WATCHED[self.name][2]

    @property
    def worse(self) -> bool:
        if self.interval is None:
            return False
        return self.interval.high < 0 if WATCHED[self.name][1] else self.interval.low > 0

    def as_json(self) -> dict:
        i = self.interval
        bounds = {"difference": i.difference, "low": i.low, "high": i.high} if i else {}
        return {
            "active": self.active.as_json(),
            "baseline": self.baseline.as_json(),
            "baseline_arm": self.baseline_arm,
            **bounds,
            "worse": self.worse,
        }


@dataclass(frozen=True)
class Watch:
    since: datetime | None  # the promotion; None for a strategy active since before promotions were dated
    figures: tuple[Watched, ...]

    @property
    def worse(self) -> list[str]:
        return [f.name for f in self.figures if f.worse]

    @property
    def harmed(self) -> bool:
        return bool(self.worse)

    @property
    def runs(self) -> int:
        """The runs it was applied to since its promotion."""
        return max((f.active.n for f in self.figures), default=0)

    @property
    def baseline_runs(self) -> int:
        return max((f.baseline.n for f in self.figures), default=0)

    def as_json(self) -> dict:
        return {
            "since": self.since.isoformat() if self.since else None,
            "runs": self.runs,
            "baseline_runs": self.baseline_runs,
            "harmed": self.harmed,
            "worse": self.worse,
            "figures": {f.name: f.as_json() for f in self.figures},
        }


def _interval(leaves: Leaves, minimum: int) -> Interval | None:
    strata = stratify(leaves)
    active = sum(s.treatment.n for s in strata if s.compared)
    baseline = sum(s.control.n for s in strata if s.compared)
    if min(active, baseline) < minimum:
        return None
    return interval_of(strata, alpha=WATCH_ALPHA)


def watch_stats(strategy: Strategy) -> Watch:
    """The active strategy's figures since promotion against its trial's (module docstring)."""
    refused = Step.objects.filter(
        run=OuterRef("run"), kind__in=[Step.Kind.TOOL_CALL, Step.Kind.MODEL_ERROR], error_class=GUARDRAIL_REFUSAL
    )
    rows = (
        AppliedStrategy.objects.filter(strategy_version__strategy=strategy, run__purpose=Run.Purpose.PRODUCTION)
        .annotate(
            refused=Exists(refused),
            quoted=ExpressionWrapper(Q(run__final_output__contains=GUARDRAIL_TEXT), output_field=BooleanField()),
        )
        .values_list(
            "arm",
            "run__created_at",
            "run__status",
            "run__score",
            "run__outcome",
            "refused",
            "quoted",
            "run__task_kind",
            "run__task__text",
        )
    )
    since = strategy.promoted_at
    leaves: dict[str, Leaves] = {name: {} for name in WATCHED}
    known = (Run.Outcome.ACCOMPLISHED, Run.Outcome.NOT_ACCOMPLISHED)
    for arm, created, status, score, outcome, refused_call, quoted, kind, text in rows.iterator():
        active = arm == AppliedStrategy.Arm.ACTIVE
        if since is not None and (created < since) == active:
            continue  # applied before its promotion was dated, or (none should be) on trial after it
        values = {"score": score, "accomplished": None, "refusals": None, "guardrail_text": None}
        if outcome in known:
            values["accomplished"] = float(outcome == Run.Outcome.ACCOMPLISHED)
        if status in (Run.Status.SUCCEEDED, Run.Status.FAILED):
            values["refusals"] = float(refused_call)
        if status == Run.Status.SUCCEEDED:
            values["guardrail_text"] = float(bool(quoted))
        key = (kind, task_template(text))
        for name, value in values.items():
            if value is not None and (active or arm == WATCHED[name][2]):
                leaves[name].setdefault(key, (Sample(), Sample()))[0 if active else 1].add(value)
    minimum = max(2, settings.STRATEGY_TRIAL_MIN_SAMPLES)
    figures = []
    for name in WATCHED:
        active, baseline = Sample(), Sample()
        for t, c in leaves[name].values():
            active, baseline = active.merged(t), baseline.merged(c)
        figures.append(Watched(name, active, baseline, _interval(leaves[name], minimum)))
    return Watch(since, tuple(figures))
