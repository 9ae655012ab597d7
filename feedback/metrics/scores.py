"""The reviewers' values of the score configurations over a window (Settings → Scores).

Counted live, not from the daily tables: reviewers give a few values a day, where runs and steps
come by the thousand. A run counts once per configuration, with its latest value (a reviewer who
scores a run again replaces their figure, as the run's composite score does).
"""

from dataclasses import dataclass, field

from django.db.models import Avg, Count, Exists, Max, Min, OuterRef

from feedback.models import ScoreConfig, ScoreValue

from .window import Window


@dataclass
class ConfigFigures:
    config: ScoreConfig
    runs: int = 0
    mean: float | None = None  # a number's mean; for yes / no, the share of yes
    low: float | None = None
    high: float | None = None
    # A categorical one's (label, runs, share), in the configuration's order.
    categories: list[tuple[str, int, float]] = field(default_factory=list)


def reviewer_scores(window: Window) -> list[ConfigFigures]:
    """One entry per configuration that is live or has values in the window, in the list's order.
    Two queries: the configurations, and every value grouped by configuration and label."""
    configs = list(ScoreConfig.objects.all())
    if not configs:
        return []
    newer = ScoreValue.objects.filter(
        config=OuterRef("config"),
        evaluation__run=OuterRef("evaluation__run"),
        evaluation_id__gt=OuterRef("evaluation_id"),
    )
    values = ScoreValue.objects.filter(evaluation__run__in=window.runs()).exclude(Exists(newer))
    grouped = values.values("config", "label").annotate(
        runs=Count("id"), mean=Avg("number"), low=Min("number"), high=Max("number")
    )
    numbers: dict[int, dict] = {}
    labels: dict[int, dict[str, int]] = {}
    for row in grouped.order_by():
        if row["label"]:
            labels.setdefault(row["config"], {})[row["label"]] = row["runs"]
        else:
            numbers[row["config"]] = row
    figures = []
    for config in configs:
        if config.archived and config.pk not in numbers and config.pk not in labels:
            continue
        entry = ConfigFigures(config=config)
        if config.pk in numbers:
            row = numbers[config.pk]
            entry.runs, entry.mean, entry.low, entry.high = row["runs"], row["mean"], row["low"], row["high"]
        counted = labels.get(config.pk, {})
        if counted:
            entry.runs = sum(counted.values())
            # Its categories first, in their order; a label since removed from it (none can be
            # while in use, but an import could) after them.
            order = config.categories + sorted(set(counted) - set(config.categories))
            entry.categories = [(label, counted.get(label, 0), counted.get(label, 0) / entry.runs) for label in order]
        figures.append(entry)
    return figures
