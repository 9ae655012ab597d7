from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _


class IdempotencyKey(models.Model):
    """A caller's ``Idempotency-Key`` on an API request that creates something, with the first
    answer to it: a retry of the same request within API_IDEMPOTENCY_KEY_HOURS gets that answer
    again instead of a second run (feedback/api/idempotency.py). Unique per caller, so requests
    racing with the same key make one row, and one run, between them."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="idempotency_keys")
    key = models.CharField(max_length=255)
    # SHA-256 of the request (method, path, body as parsed): the same key on another request is refused.
    fingerprint = models.CharField(max_length=64)
    # The first answer (its status and JSON body), replayed as it was given.
    status = models.PositiveSmallIntegerField()
    response = models.JSONField()
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        verbose_name = _("idempotency key")
        verbose_name_plural = _("idempotency keys")
        constraints = [models.UniqueConstraint(fields=["user", "key"], name="idempotencykey_user_key_unique")]

    def __str__(self) -> str:
        return f"{self.user_id}:{self.key}"
