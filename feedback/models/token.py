from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _


class ApiToken(models.Model):
    """A person's key to the JSON API (feedback/api/): it acts with its user's permissions,
    narrowed to reading by a read-only scope. Only the SHA-256 of the token is stored; the token
    itself is shown once, when it is created (feedback/api/tokens.py)."""

    class Scope(models.TextChoices):
        READ = "read", _("Read only")
        WRITE = "write", _("Read and write")

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(_("name"), max_length=100)
    scope = models.CharField(_("scope"), max_length=8, choices=Scope.choices, default=Scope.READ)
    # The token's first characters, shown in lists so a person can tell their tokens apart.
    prefix = models.CharField(max_length=16, editable=False)
    # hex SHA-256 of the whole token: a token is 256 random bits, so a fast hash is enough (a
    # slow one protects guessable passwords); unique, so a request finds its token by index.
    hashed = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    # Written at most once a minute per token (tokens.py), not on every request.
    last_used_at = models.DateTimeField(_("last used"), null=True, blank=True, editable=False)
    expires_at = models.DateTimeField(_("expires"), null=True, blank=True)
    # Kept after revocation, so the list shows what was revoked when; a revoked token never works again.
    revoked_at = models.DateTimeField(_("revoked"), null=True, blank=True)

    class Meta:
        verbose_name = _("API token")
        verbose_name_plural = _("API tokens")
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["user", "-created_at"], name="apitoken_user_recent")]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_expired(self) -> bool:
        return self.expires_at is not None and self.expires_at <= timezone.now()

    @property
    def is_usable(self) -> bool:
        return self.revoked_at is None and not self.is_expired
