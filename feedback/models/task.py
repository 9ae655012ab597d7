from pathlib import Path

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _


class Workspace(models.Model):
    """A folder of files that runs start from; each run works on its own copy of it.

    A workspace with an owner (one made from a person's uploads) is theirs: only they, and those
    who read every run, may start runs from it. Without an owner (the demo) it is shared."""

    name = models.CharField(
        _("name"),
        max_length=64,
        unique=True,
        validators=[RegexValidator(r"^[a-z0-9][a-z0-9_-]*$", _("Lower-case letters, digits, - and _."))],
    )
    description = models.CharField(_("description"), max_length=300, blank=True)
    # CASCADE, not SET_NULL: a deleted person's uploads must not become everyone's.
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name=_("owner"),
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="workspaces",
    )
    created_at = models.DateTimeField(default=timezone.now)
    # The folder's size as the app wrote it (uploads, the demo; feedback/quota.py), so no page walks
    # the disk for it. None: not measured yet (a folder an operator put there; beat's clean-up
    # measures it).
    size_bytes = models.PositiveBigIntegerField(_("size in bytes"), null=True, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def path(self) -> Path:
        return Path(settings.WORKSPACES_ROOT) / self.name


class Task(models.Model):
    """What a person submitted: the instruction, its kind and, optionally, the expected answer."""

    class Kind(models.TextChoices):
        FILE_ANALYSIS = "file_analysis", _("File analysis")
        ARITHMETIC = "arithmetic", _("Arithmetic")
        EMAIL_TRIAGE = "email_triage", _("Support-email triage")
        GENERAL = "general", _("General")

    TEXT_MAX_LENGTH = 4000

    text = models.TextField(_("task"), max_length=TEXT_MAX_LENGTH)
    kind = models.CharField(_("kind"), max_length=32, choices=Kind.choices, default=Kind.GENERAL)
    expected_answer = models.TextField(_("expected answer"), blank=True, max_length=TEXT_MAX_LENGTH)
    workspace = models.ForeignKey(
        Workspace, verbose_name=_("workspace"), null=True, blank=True, on_delete=models.SET_NULL
    )
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="tasks")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["created_by", "-created_at"], name="task_author_recent")]

    def __str__(self) -> str:
        return self.text[:80]
