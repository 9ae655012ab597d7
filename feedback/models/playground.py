"""The playground: a person re-runs one run with an edited system prompt or guidance, to see what
the edit would have done, beside the original (issue 26.4). The re-run is a run of its own,
``purpose=playground``, measured apart like an experiment's."""

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from .run import Run
from .strategy import StrategyVersion


class PlaygroundRun(models.Model):
    run = models.OneToOneField(Run, on_delete=models.CASCADE, related_name="playground")
    original = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="playground_runs")
    # The whole system prompt, edited ("" keeps the one production would build now).
    system_prompt = models.TextField(_("system prompt"), blank=True)
    # Guidance added to what production runs get (a strategy's, edited, or a person's own).
    guidance = models.TextField(_("guidance"), blank=True)
    # The strategy whose guidance was edited: its guardrails apply too.
    strategy_version = models.ForeignKey(
        StrategyVersion, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    note = models.CharField(_("note"), max_length=200, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"Playground run #{self.run_id} of #{self.original_id}"
