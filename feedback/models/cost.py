from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _


class ModelPrice(models.Model):
    """What a model's tokens cost, in US dollars per million, from a date on, as operators set it.

    A step is priced when it is written, at the price of that moment (feedback/costs.py), so a
    later change of the table never rewrites what past runs cost. ``model_name`` is the name a run
    records (``Run.model_name``, ``LLM_MODEL``); ``*`` prices every model without a row of its own.
    A model may have several rows, each in effect from its ``effective_from`` until the next one's
    (as Langfuse's model definitions' start dates): a price change announced for the first of the
    month is entered beforehand.
    """

    ANY_MODEL = "*"

    model_name = models.CharField(
        _("model"), max_length=200, help_text=_("As runs record it (LLM_MODEL); * for any other model.")
    )
    effective_from = models.DateTimeField(
        _("in effect from"), default=timezone.now, help_text=_("Calls recorded from then on are priced at it.")
    )
    input_per_million = models.DecimalField(_("input, USD per million tokens"), max_digits=12, decimal_places=6)
    output_per_million = models.DecimalField(_("output, USD per million tokens"), max_digits=12, decimal_places=6)
    note = models.CharField(_("note"), max_length=300, blank=True)
    updated_at = models.DateTimeField(auto_now=True)
    # Who last changed it on the Settings pages (feedback/views/settings_*.py); empty for the admin.
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, editable=False, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["model_name", "-effective_from"]
        constraints = [
            models.UniqueConstraint(fields=["model_name", "effective_from"], name="model_price_once_per_date"),
            models.CheckConstraint(
                condition=models.Q(input_per_million__gte=0, output_per_million__gte=0), name="model_price_not_negative"
            ),
        ]

    def __str__(self) -> str:
        return self.model_name
