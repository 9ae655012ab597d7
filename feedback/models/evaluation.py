from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from .run import Run


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
    feedback = models.TextField(blank=True)
    details = models.JSONField(default=dict, blank=True)
    author = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    corrected_answer = models.TextField(blank=True)
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
