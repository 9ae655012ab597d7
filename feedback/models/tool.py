from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from feedback.storable import StorableJSONField

from .run import Run


class ToolSetting(models.Model):
    """Operator overrides for a registered tool, read at every call: no restart needed."""

    name = models.CharField(max_length=100, unique=True)
    enabled = models.BooleanField(default=True)
    timeout_seconds = models.FloatField(null=True, blank=True)
    config = StorableJSONField(default=dict, blank=True)
    updated_at = models.DateTimeField(auto_now=True)
    # Who last changed it on the Settings pages (feedback/views/settings_*.py); empty for the admin.
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, editable=False, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        from feedback.evaluation.validation import check_rules

        rules = self.config.get("result_rules", []) if isinstance(self.config, dict) else None
        problems = check_rules(rules) if rules is not None else [_("Expected an object.")]
        if problems:
            raise ValidationError({"config": problems})


class ToolConfirmation(models.Model):
    """A sensitive tool call waiting for, or decided by, a person; or withdrawn, when its run
    ended first (feedback/lifecycle.py): ``decided_at`` then says when, ``reason`` why and
    ``decided_by`` who cancelled the run, if a person did."""

    class Status(models.TextChoices):
        PENDING = "pending", _("Pending")
        APPROVED = "approved", _("Approved")
        REJECTED = "rejected", _("Rejected")
        WITHDRAWN = "withdrawn", _("Withdrawn")

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="confirmations")
    turn = models.PositiveIntegerField()
    tool_call_id = models.CharField(max_length=100)
    tool_name = models.CharField(max_length=100)
    arguments = models.JSONField(default=dict)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    requested_at = models.DateTimeField(default=timezone.now)
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    decided_at = models.DateTimeField(null=True, blank=True)
    reason = models.TextField(blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "tool_call_id"], name="confirmation_once_per_call")]
        indexes = [models.Index(fields=["status", "requested_at"], name="confirmation_pending")]

    def __str__(self) -> str:
        return f"{self.tool_name} in {self.run} ({self.status})"
