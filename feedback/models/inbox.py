"""The reviewer inbox's claims (issue 26.1): who is working on which item, so two reviewers do
not score the same run or decide the same proposal at once. A claim is advisory (deciding an
item needs no claim) and lapses after ``CLAIM_TTL``: a reviewer who walks away blocks no one."""

from datetime import timedelta

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

# Long enough to read a trace and score it; short enough that a forgotten claim frees itself.
CLAIM_TTL = timedelta(minutes=30)


class InboxClaim(models.Model):
    class Kind(models.TextChoices):
        CONFIRMATION = "confirmation", _("Confirmation")
        PROPOSAL = "proposal", _("Proposal")
        RUN = "run", _("Run to score")

    kind = models.CharField(max_length=16, choices=Kind.choices)
    # The item's primary key in its own table (ToolConfirmation, Strategy or Run): one claim
    # table for three kinds, rather than three nullable foreign keys.
    object_id = models.PositiveBigIntegerField()
    claimed_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    claimed_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["kind", "object_id"], name="inbox_claim_one_per_item")]

    def __str__(self) -> str:
        return f"{self.kind} #{self.object_id} claimed by {self.claimed_by_id}"

    @property
    def expires_at(self):
        return self.claimed_at + CLAIM_TTL

    def is_live(self, now=None) -> bool:
        """Whether the claim still holds (an expired one is anyone's to take)."""
        return (now or timezone.now()) < self.expires_at
