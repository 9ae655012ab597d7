"""Alert rules, the incidents they open and resolve, and each notification of them (feedback/alerts/)."""

import secrets

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import URLValidator, validate_email
from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from .task import Task


def new_secret() -> str:
    return secrets.token_urlsafe(32)


class AlertRule(models.Model):
    """A condition beat checks every minute, and where to say when it starts and stops holding."""

    class Kind(models.TextChoices):
        SCORE_DROP = "score_drop", _("Score drop")
        ERROR_RATE = "error_rate", _("Error-rate rise")
        HARMFUL_TRIAL = "harmful_trial", _("Harmful trial")
        HARMFUL_ACTIVE = "harmful_active", _("Harmful active strategy")
        STUCK_QUEUE = "stuck_queue", _("Stuck queue")

    class ErrorMeasure(models.TextChoices):
        FAILED_RUNS = "failed_runs", _("Runs with a failed tool call or a failed status")
        REPEATED_ERRORS = "repeated_errors", _("Repeated-error rate")

    ALL_KINDS = ""
    EACH_KIND = "*"
    SCOPES = [(ALL_KINDS, _("All runs together")), (EACH_KIND, _("Each task kind separately")), *Task.Kind.choices]

    name = models.CharField(_("name"), max_length=200)
    kind = models.CharField(_("kind"), max_length=32, choices=Kind.choices)
    enabled = models.BooleanField(_("enabled"), default=True)
    # Score drop and error-rate rise.
    task_kind = models.CharField(_("task kind"), max_length=32, choices=SCOPES, default=ALL_KINDS, blank=True)
    window_minutes = models.PositiveIntegerField(
        _("window (minutes)"), default=60, help_text=_("The recent runs judged; compared with as long a window before.")
    )
    threshold = models.FloatField(
        _("threshold"),
        null=True,
        blank=True,
        help_text=_("Score drop: the average score below this. Error rate: the rate above this (0 to 1)."),
    )
    change = models.FloatField(
        _("change"),
        null=True,
        blank=True,
        help_text=_("Dropped (score) or risen (error rate) by at least this much against the window before."),
    )
    error_measure = models.CharField(
        _("error measure"), max_length=32, choices=ErrorMeasure.choices, default=ErrorMeasure.FAILED_RUNS
    )
    min_runs = models.PositiveIntegerField(
        _("minimum runs"),
        default=10,
        help_text=_("No rate is judged on fewer runs (scored runs for a score; assigned runs for a trial)."),
    )
    # Stuck queue: each empty field is not checked.
    queued_minutes = models.PositiveIntegerField(_("queued longer than (minutes)"), null=True, blank=True, default=15)
    heartbeat_minutes = models.PositiveIntegerField(
        _("running with no heartbeat for (minutes)"), null=True, blank=True, default=5
    )
    confirmation_minutes = models.PositiveIntegerField(
        _("awaiting a confirmation longer than (minutes)"), null=True, blank=True, default=60
    )
    webhook_urls = models.TextField(_("webhook URLs"), blank=True, help_text=_("One URL a line."))
    emails = models.TextField(_("email addresses"), blank=True, help_text=_("One address a line."))
    # Signs every webhook POST (HMAC-SHA256) so receivers can tell them from forgeries.
    secret = models.CharField(_("signing secret"), max_length=100, default=new_secret)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)
    # Who last changed it on the Settings pages (feedback/views/settings_*.py); empty for the admin.
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, editable=False, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["name", "id"]

    def __str__(self) -> str:
        return self.name

    def webhook_url_list(self) -> list[str]:
        return _lines(self.webhook_urls)

    def email_list(self) -> list[str]:
        return _lines(self.emails)

    def clean(self) -> None:
        errors: dict[str, list] = {}
        if self.kind in (self.Kind.SCORE_DROP, self.Kind.ERROR_RATE):
            if self.threshold is None and self.change is None:
                errors.setdefault("threshold", []).append(_("Give a threshold, a change, or both."))
            if self.threshold is not None and not 0 <= self.threshold <= 1:
                errors.setdefault("threshold", []).append(_("Scores and rates are between 0 and 1."))
            if self.change is not None and not 0 < self.change <= 1:
                errors.setdefault("change", []).append(_("A change is more than 0 and at most 1."))
            if not self.window_minutes:
                errors.setdefault("window_minutes", []).append(_("A window is at least one minute."))
        elif self.task_kind:
            errors.setdefault("task_kind", []).append(_("Only score-drop and error-rate rules look at one task kind."))
        if self.kind == self.Kind.STUCK_QUEUE and not (
            self.queued_minutes or self.heartbeat_minutes or self.confirmation_minutes
        ):
            errors.setdefault("queued_minutes", []).append(_("Give at least one of the three waits."))
        if self.kind != self.Kind.STUCK_QUEUE and self.min_runs < 2:
            errors.setdefault("min_runs", []).append(_("A rate needs at least 2 runs."))
        url = URLValidator(schemes=["http", "https"])
        for line in self.webhook_url_list():
            try:
                url(line)
            except ValidationError:
                errors.setdefault("webhook_urls", []).append(_("Not an http(s) URL: %(url)s") % {"url": line})
        for line in self.email_list():
            try:
                validate_email(line)
            except ValidationError:
                errors.setdefault("emails", []).append(_("Not an email address: %(address)s") % {"address": line})
        if errors:
            raise ValidationError(errors)


def _lines(text: str) -> list[str]:
    return list(dict.fromkeys(line.strip() for line in text.splitlines() if line.strip()))


class AlertIncident(models.Model):
    """One stretch of time during which a rule's condition held for one subject (a task kind, a
    strategy on trial, a kind of stuck run). Opened once and resolved once, each with one
    notification per channel: at most one incident per rule and subject is open at a time."""

    class State(models.TextChoices):
        OPEN = "open", _("Open")
        RESOLVED = "resolved", _("Resolved")

    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="incidents")
    subject = models.CharField(max_length=100)
    state = models.CharField(max_length=16, choices=State.choices, default=State.OPEN)
    opened_at = models.DateTimeField(default=timezone.now)
    resolved_at = models.DateTimeField(null=True, blank=True)
    # The last evaluation that found the condition still holding.
    checked_at = models.DateTimeField(default=timezone.now)
    figures = models.JSONField(default=dict)  # what was measured when it opened
    resolved_figures = models.JSONField(default=dict, blank=True)  # ... and when it resolved

    class Meta:
        ordering = ["-opened_at", "-id"]
        constraints = [
            # Two evaluations at once (two beats, a redelivered task) cannot both open it: the
            # second INSERT fails, and only the first notifies.
            models.UniqueConstraint(
                fields=["rule", "subject"], condition=Q(state="open"), name="alert_incident_one_open"
            ),
        ]
        indexes = [models.Index(fields=["-opened_at", "-id"], name="alert_incident_recent")]

    def __str__(self) -> str:
        return f"{self.rule} / {self.subject} ({self.state})"


class AlertDelivery(models.Model):
    """One notification of an incident's opening or resolution to one webhook or address."""

    class Event(models.TextChoices):
        OPEN = "open", _("Opened")
        RESOLVE = "resolve", _("Resolved")

    class Channel(models.TextChoices):
        WEBHOOK = "webhook", _("Webhook")
        EMAIL = "email", _("Email")

    class Status(models.TextChoices):
        PENDING = "pending", _("Pending")
        DELIVERED = "delivered", _("Delivered")
        FAILED = "failed", _("Failed")

    incident = models.ForeignKey(AlertIncident, on_delete=models.CASCADE, related_name="deliveries")
    event = models.CharField(max_length=16, choices=Event.choices)
    channel = models.CharField(max_length=16, choices=Channel.choices)
    target = models.CharField(max_length=2000)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    # When a worker may make the next attempt (a retry may come sooner: Celery's jitter); a worker
    # making one moves it past its timeout, so a duplicate message finds the delivery taken
    # (feedback/alerts/delivery.py, alert_deliver).
    next_attempt_at = models.DateTimeField(default=timezone.now)
    created_at = models.DateTimeField(default=timezone.now)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["incident", "event", "channel", "target"], name="alert_delivery_once"),
        ]
        indexes = [
            models.Index(fields=["next_attempt_at"], name="alert_delivery_pending", condition=Q(status="pending")),
        ]

    def __str__(self) -> str:
        return f"{self.incident} {self.event} → {self.channel} ({self.status})"


class AlertAttempt(models.Model):
    """One try of a delivery, with what the receiver answered."""

    class Outcome(models.TextChoices):
        DELIVERED = "delivered", _("Delivered")
        RETRY = "retry", _("Failed, retried")
        FAILED = "failed", _("Failed")

    delivery = models.ForeignKey(AlertDelivery, on_delete=models.CASCADE, related_name="attempt_rows")
    number = models.PositiveSmallIntegerField()
    started_at = models.DateTimeField(default=timezone.now)
    duration_ms = models.PositiveIntegerField(default=0)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    outcome = models.CharField(max_length=16, choices=Outcome.choices)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["delivery", "number"]
        constraints = [models.UniqueConstraint(fields=["delivery", "number"], name="alert_attempt_once")]

    def __str__(self) -> str:
        return f"{self.delivery} attempt {self.number} ({self.outcome})"
