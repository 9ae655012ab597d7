from django.db import models
from django.utils.translation import gettext_lazy as _


class LoginFailures(models.Model):
    """Recent failed logins for one account name or one client address (feedback/throttle.py).

    A row counts the failures that followed one another within the lockout period; it is gone
    (or starts again at one) once that long has passed since its last failure. Deleting a row
    unlocks what it locked."""

    class Scope(models.TextChoices):
        ACCOUNT = "account", _("Account")
        ADDRESS = "address", _("IP address")

    scope = models.CharField(max_length=10, choices=Scope.choices)
    # The username as typed (an account that does not exist is counted the same way, so a
    # lockout says nothing about which accounts exist), or the client's address.
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
