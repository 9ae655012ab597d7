"""Paired experiments: a change run against a dataset's items, every item with and without it.

A pair is one item (and repeat) run twice, once in each arm; its difference (the checker's pass
with the change minus without it) is what the paired sequential test decides on
(feedback/experiments/paired.py). The verdict and the figures it was decided on are frozen into
the experiment when it ends, so what a reviewer read stays what it was.
"""

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from .dataset import DatasetItem, DatasetVersion
from .run import Run
from .strategy import Strategy, StrategyVersion


class Experiment(models.Model):
    class Change(models.TextChoices):
        STRATEGY = "strategy", _("A strategy version")
        GUIDANCE = "guidance", _("Base-prompt guidance")
        GUARDRAILS = "guardrails", _("Guardrails")
        MODEL = "model", _("Another model")

    class Status(models.TextChoices):
        RUNNING = "running", _("Running")
        FINISHED = "finished", _("Finished")
        STOPPED = "stopped", _("Stopped")

    class Decision(models.TextChoices):
        PROMOTE = "promote", _("Promote: the change helps")
        REJECT = "reject", _("Reject: the change harms")
        UNDECIDED = "undecided", _("Undecided after every item")

    title = models.CharField(_("title"), max_length=200)
    dataset_version = models.ForeignKey(DatasetVersion, on_delete=models.PROTECT, related_name="experiments")
    # "" runs every item; "mining" or "held_out" only that split's.
    split = models.CharField(_("split"), max_length=16, blank=True, choices=DatasetItem.Split.choices)
    repeats = models.PositiveSmallIntegerField(_("repeats"), default=1)
    change_kind = models.CharField(_("change"), max_length=16, choices=Change.choices)
    strategy = models.ForeignKey(Strategy, null=True, blank=True, on_delete=models.PROTECT, related_name="experiments")
    # The strategy's version as it was when the experiment started: the one both arms compare.
    strategy_version = models.ForeignKey(
        StrategyVersion, null=True, blank=True, on_delete=models.PROTECT, related_name="experiments"
    )
    # The other kinds' change: {"guidance": "..."}, {"guardrails": [...]} or {"model": "..."}.
    change = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.RUNNING)
    decision = models.CharField(max_length=16, choices=Decision.choices, blank=True)
    # The paired verdict and the arms' figures it was decided on, frozen when the experiment ends.
    verdict = models.JSONField(default=dict, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=models.Q(repeats__gte=1, repeats__lte=5), name="experiment_repeats_1_5"),
            models.CheckConstraint(
                condition=~models.Q(change_kind="strategy") | models.Q(strategy_version__isnull=False),
                name="experiment_strategy_has_version",
            ),
        ]

    def __str__(self) -> str:
        return self.title

    @property
    def running(self) -> bool:
        return self.status == self.Status.RUNNING


class ExperimentPair(models.Model):
    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="pairs")
    item = models.ForeignKey(DatasetItem, on_delete=models.PROTECT, related_name="experiment_pairs")
    repeat = models.PositiveSmallIntegerField(default=1)
    # The order pairs are started in (shuffled once, so the items' order in the file decides nothing).
    position = models.PositiveIntegerField()
    control_run = models.OneToOneField(
        Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="experiment_control"
    )
    treatment_run = models.OneToOneField(
        Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="experiment_treatment"
    )
    # The checker's pass (1) or fail (0) of each arm's run, and their difference, once both ended.
    control_pass = models.FloatField(null=True, blank=True)
    treatment_pass = models.FloatField(null=True, blank=True)
    difference = models.FloatField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["experiment", "position"]
        constraints = [
            models.UniqueConstraint(fields=["experiment", "item", "repeat"], name="experiment_pair_once"),
        ]

    def __str__(self) -> str:
        return f"{self.experiment} #{self.position}"

    @property
    def started(self) -> bool:
        return self.control_run_id is not None

    @property
    def outcome(self) -> str:
        """win / loss / tie for the change, "" before both runs ended."""
        if self.difference is None:
            return ""
        return "win" if self.difference > 0 else "loss" if self.difference < 0 else "tie"
