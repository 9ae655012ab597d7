from django.db import models
from django.utils.translation import gettext_lazy as _


class LoginFailures(models.Model):
    """Recent failed logins for one account name or one client address, or recent password-reset
    mails for one email address or one client address (feedback/throttle.py).

    A row counts the failures (mails) that followed one another within its scope's period; it is
    gone (or starts again at one) once that long has passed since its last one. Deleting a row
    unlocks what it locked."""

    class Scope(models.TextChoices):
        ACCOUNT = "account", _("Account")
        ADDRESS = "address", _("IP address")
        RESET_EMAIL = "reset_mail", _("Password-reset mails to")
        RESET_ADDRESS = "reset_ip", _("Password-reset requests from")

    scope = models.CharField(max_length=10, choices=Scope.choices)
    # The username as typed (an account that does not exist is counted the same way, so a
    # lockout says nothing about which accounts exist), the client's address, or the email
    # address a password-reset mail was asked for (normalised: throttle.reset_mail_key).
    key = models.CharField(max_length=150)
    failures = models.PositiveIntegerField(default=0)
    last_failure_at = models.DateTimeField(db_index=True)

    class Meta:
        verbose_name = _("login failures")
        verbose_name_plural = _("login failures")
        ordering = ["-last_failure_at"]
        constraints = [models.UniqueConstraint(fields=["scope", "key"], name="login_failures_scope_key")]

    def __str__(self) -> str:
        return f"{self.get_scope_display()} {self.key}"
