"""Strata: trials compare like with like, a task's runs in one arm with the same task's in the other.

A run's stratum is its task kind and its **task template**: the task's text, lower-cased, its
spacing collapsed and every number blanked, so "What is (12 + 7) * 3?" and "What is (40 + 2) * 9?"
are one template while "Summarise report.txt" and "Summarise release-notes.txt" (one easy, one
that fails) are two. Every run of a trial matches the strategy's condition (the mined pattern), so
the pattern itself separates nothing within a trial; experiment runs, which come from dataset
items, never enter a trial.

A stratum is compared only when it has runs in both arms. The runs of templates that do not
(yet) are pooled, per task kind, into an "other tasks" stratum of that kind, and what is still
one-armed after that into one stratum of all the rest; runs in a stratum with one arm only at the
end compare nothing and are left out of the difference (they still count in the arms' runs, the
split check and the breakdown). Which strata are pooled depends on the assignment, never on the
outcomes, so under no effect the estimate stays centred on zero (the simulations check it).
"""

import re
from collections.abc import Iterable
from dataclasses import dataclass

from .sequential import ALPHA, Interval, Sample, pooled_variances, stratified_interval

_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
TEMPLATE_LENGTH = 200
OTHER = ""  # the template of a pooled stratum
ALL_KINDS = ""


def task_template(text: str) -> str:
    """The task's text with what varies between instances of one task blanked (numbers)."""
    return _NUMBER.sub("#", " ".join(text.lower().split()))[:TEMPLATE_LENGTH]


@dataclass(frozen=True)
class Stratum:
    """One stratum's values in each arm. ``template`` is OTHER for a pooled stratum, ``kind``
    ALL_KINDS for the one that pools every kind's rest; ``templates`` counts what it pools."""

    kind: str
    template: str
    treatment: Sample
    control: Sample
    templates: int = 1

    @property
    def compared(self) -> bool:
        return bool(self.treatment.n and self.control.n)

    @property
    def difference(self) -> float | None:
        return self.treatment.mean - self.control.mean if self.compared else None

    def as_json(self) -> dict:
        return {
            "kind": self.kind,
            "template": self.template,
            "templates": self.templates,
            "treatment": self.treatment.as_json(),
            "control": self.control.as_json(),
            "difference": self.difference,
        }


Leaves = dict[tuple[str, str], tuple[Sample, Sample]]


def stratify(leaves: Leaves) -> list[Stratum]:
    """The strata compared, from each (kind, template)'s values per arm: templates with both
    arms as they are, the rest pooled per kind, then all together (see the module docstring).
    The last stratum may have one arm only: it is listed, and compares nothing."""
    kept: list[Stratum] = []
    rest: dict[str, list[Stratum]] = {}
    for (kind, template), (t, c) in leaves.items():
        stratum = Stratum(kind, template, t, c)
        (kept if stratum.compared else rest.setdefault(kind, [])).append(stratum)
    leftover = []
    for kind, strata in rest.items():
        pooled = _pool(kind, strata)
        (kept if pooled.compared else leftover).append(pooled)
    if leftover:
        kept.append(_pool(ALL_KINDS, leftover))
    return kept


def _pool(kind: str, strata: list[Stratum]) -> Stratum:
    if len(strata) == 1 and strata[0].kind == kind:
        return strata[0]
    t, c = Sample(), Sample()
    for stratum in strata:
        t, c = t.merged(stratum.treatment), c.merged(stratum.control)
    return Stratum(kind, OTHER, t, c, sum(s.templates for s in strata))


def interval_of(strata: Iterable[Stratum], *, alpha: float = ALPHA) -> Interval | None:
    """The always-valid interval of the difference, like with like."""
    return stratified_interval(((s.treatment, s.control) for s in strata), alpha=alpha)


def within_variances(strata: Iterable[Stratum]) -> tuple[float, float] | None:
    """Each arm's variance within strata, pooled over those compared (None before there is one)."""
    return pooled_variances((s.treatment, s.control) for s in strata)
