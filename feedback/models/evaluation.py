from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from feedback.storable import StorableJSONField

from .run import Run
from .task import Task


class Evaluation(models.Model):
    """One evaluator's verdict on a run. Re-running the chain adds a round; history stays."""

    class Kind(models.TextChoices):
        RULE = "rule", _("Rule-based")
        REFERENCE = "reference", _("Reference")
        JUDGE = "judge", _("LLM judge")
        HUMAN = "human", _("Human")

    class Status(models.TextChoices):
        OK = "ok", _("Scored")
        FAILED = "failed", _("Evaluator failed")

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="evaluations")
    round = models.PositiveIntegerField(default=1)
    evaluator = models.CharField(max_length=100)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.OK)
    score = models.FloatField(null=True, blank=True)
    weight = models.FloatField(default=1.0)
    # The evaluator's verdict on the task, beside its score: done (True), not done (False), or
    # no verdict (None). The run's outcome is decided from these (chain.py, ``run_outcome``).
    accomplished = models.BooleanField(null=True, blank=True)
    feedback = models.TextField(blank=True)
    details = models.JSONField(default=dict, blank=True)
    author = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    corrected_answer = models.TextField(blank=True)
    # An LLM judge's tokens at its model's price, in US dollars (feedback/costs.py); None otherwise.
    cost = models.FloatField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["run", "round", "id"]
        indexes = [
            models.Index(fields=["run", "round"], name="evaluation_run_round"),
            models.Index(fields=["kind", "created_at"], name="evaluation_kind_created"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(score__isnull=True) | models.Q(score__gte=0, score__lte=1),
                name="evaluation_score_in_unit_range",
            ),
            models.CheckConstraint(
                condition=~models.Q(kind="human") | models.Q(author__isnull=False),
                name="human_evaluation_has_author",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.evaluator} on {self.run}: {self.score}"

    @property
    def evaluator_label(self) -> str:
        """How the UI names the evaluator; the offline judge is never passed off as an LLM."""
        if self.evaluator == OFFLINE_JUDGE_NAME:
            return str(_("Offline heuristic judge (no LLM)"))
        return self.evaluator


# Kept here, not in feedback.evaluation, so the model needs no import of the evaluator code.
OFFLINE_JUDGE_NAME = "offline_heuristic_judge"


class EvaluationProfile(models.Model):
    """Which evaluators score runs of one task kind, with what weight and configuration.

    ``evaluators`` is a list of ``{"evaluator": "rule"|"reference"|"judge", "weight": 0.3,
    "config": {...}}``; see feedback/evaluation/profiles.py for the defaults and the checks.
    """

    task_kind = models.CharField(max_length=32, choices=Task.Kind.choices, unique=True)
    evaluators = StorableJSONField(default=list)
    # Composite scores below this put a run in the review queue.
    review_below = models.FloatField(default=0.5)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["task_kind"]

    def __str__(self) -> str:
        return f"Evaluation profile: {self.get_task_kind_display()}"

    def clean(self) -> None:
        from feedback.evaluation.profiles import check_evaluators

        problems = check_evaluators(self.evaluators)
        if problems:
            raise ValidationError({"evaluators": problems})
