from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _


class ModelPrice(models.Model):
    """What a model's tokens cost, in US dollars per million, as operators set it in the admin.

    A step is priced when it is written, at the price of that moment (feedback/costs.py), so a
    later change of the table never rewrites what past runs cost. ``model_name`` is the name a run
    records (``Run.model_name``, ``LLM_MODEL``); ``*`` prices every model without a row of its own.
    """

    ANY_MODEL = "*"

    model_name = models.CharField(
        _("model"), max_length=200, unique=True, help_text=_("As runs record it (LLM_MODEL); * for any other model.")
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
        ordering = ["model_name"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(input_per_million__gte=0, output_per_million__gte=0), name="model_price_not_negative"
            )
        ]

    def __str__(self) -> str:
        return self.model_name
