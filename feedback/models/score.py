import math

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from .evaluation import Evaluation


class ScoreConfig(models.Model):
    """One thing reviewers rate on a run beside the 0–1 score, as operators define it (as
    Langfuse's and LangSmith's score configurations): a number in a range, one of some categories,
    or yes / no. The score form, the API and the metrics page all read these.

    Once a reviewer has used it, what its values mean is fixed: its type cannot change, a
    category in use cannot go and the range must keep every value given; archive it instead.
    """

    class DataType(models.TextChoices):
        NUMERIC = "numeric", _("Number")
        CATEGORICAL = "categorical", _("Category")
        BOOLEAN = "boolean", _("Yes / no")

    name = models.CharField(_("name"), max_length=100, unique=True)
    description = models.CharField(
        _("description"), max_length=500, blank=True, help_text=_("What reviewers should judge: shown with the field.")
    )
    data_type = models.CharField(_("type"), max_length=12, choices=DataType.choices, default=DataType.NUMERIC)
    min_value = models.FloatField(_("minimum"), null=True, blank=True, help_text=_("Numbers only; empty: no bound."))
    max_value = models.FloatField(_("maximum"), null=True, blank=True, help_text=_("Numbers only; empty: no bound."))
    categories = models.JSONField(_("categories"), default=list, blank=True)
    required = models.BooleanField(
        _("required"), default=False, help_text=_("A reviewer's score is refused without it.")
    )
    archived = models.BooleanField(
        _("archived"), default=False, help_text=_("Gone from the forms; the values given stay and are still counted.")
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, editable=False, on_delete=models.SET_NULL, related_name="+"
    )

    MAX_CATEGORIES = 20
    CATEGORY_MAX_LENGTH = 60

    class Meta:
        ordering = ["archived", "name"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(min_value__isnull=True)
                | models.Q(max_value__isnull=True)
                | models.Q(min_value__lt=models.F("max_value")),
                name="score_config_range_not_empty",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        errors: dict[str, str] = {}
        if self.data_type == self.DataType.NUMERIC:
            if self.min_value is not None and self.max_value is not None and self.min_value >= self.max_value:
                errors["max_value"] = _("The maximum is above the minimum.")
        else:
            # Bounds of a category or a yes / no mean nothing: not kept, so they cannot mislead.
            self.min_value = self.max_value = None
        if self.data_type == self.DataType.CATEGORICAL:
            if len(self.categories) < 2:
                errors["categories"] = _("Give at least two categories.")
            elif len(self.categories) > self.MAX_CATEGORIES:
                errors["categories"] = _("At most %(n)d categories.") % {"n": self.MAX_CATEGORIES}
        else:
            self.categories = []
        if self.pk and not errors:
            errors.update(self._keeps_given_values())
        if errors:
            raise ValidationError(errors)

    def _keeps_given_values(self) -> dict[str, str]:
        given = ScoreValue.objects.filter(config_id=self.pk)
        if not given.exists():
            return {}
        before = ScoreConfig.objects.get(pk=self.pk)
        if before.data_type != self.data_type:
            return {"data_type": _("Reviewers have given values of this type: archive it and make a new one.")}
        if self.data_type == self.DataType.CATEGORICAL:
            used = set(given.values_list("label", flat=True)) - set(self.categories)
            if used:
                return {"categories": _("In use, so kept: %(labels)s.") % {"labels": ", ".join(sorted(used))}}
        if self.data_type == self.DataType.NUMERIC:
            low, high = given.aggregate(low=models.Min("number"), high=models.Max("number")).values()
            if (self.min_value is not None and low < self.min_value) or (
                self.max_value is not None and high > self.max_value
            ):
                return {
                    "min_value": _("Values from %(low)g to %(high)g are given: the range keeps them.")
                    % {"low": low, "high": high}
                }
        return {}

    @property
    def range_label(self) -> str:
        """How the form and the list show what a value may be."""
        if self.data_type == self.DataType.CATEGORICAL:
            return " / ".join(self.categories)
        if self.data_type == self.DataType.BOOLEAN:
            return str(_("yes / no"))
        low = "−∞" if self.min_value is None else f"{self.min_value:g}"
        high = "∞" if self.max_value is None else f"{self.max_value:g}"
        return f"{low} – {high}"


class ScoreValue(models.Model):
    """A reviewer's value for one score configuration, given with their score of a run (the human
    evaluation it came with: a later score of the same run is a new evaluation with new values)."""

    evaluation = models.ForeignKey(Evaluation, on_delete=models.CASCADE, related_name="score_values")
    config = models.ForeignKey(ScoreConfig, on_delete=models.PROTECT, related_name="values")
    # A number (a boolean is 1 or 0, so its mean is the share of yes) or a category's label.
    number = models.FloatField(null=True, blank=True)
    label = models.CharField(max_length=ScoreConfig.CATEGORY_MAX_LENGTH, blank=True)

    class Meta:
        ordering = ["config__name"]
        constraints = [
            models.UniqueConstraint(fields=["evaluation", "config"], name="score_value_once_per_evaluation"),
            models.CheckConstraint(
                condition=(models.Q(number__isnull=False) & models.Q(label=""))
                | (models.Q(number__isnull=True) & ~models.Q(label="")),
                name="score_value_number_or_label",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.config}: {self.display}"

    def clean(self) -> None:
        """What its configuration allows; the service checks every value with this before saving."""
        config, types = self.config, ScoreConfig.DataType
        if config.data_type == types.CATEGORICAL:
            if self.number is not None or self.label not in config.categories:
                raise ValidationError(
                    _("%(name)s is one of: %(allowed)s.") % {"name": config, "allowed": config.range_label}
                )
            return
        if self.label or self.number is None or not math.isfinite(self.number):
            raise ValidationError(_("%(name)s is a number.") % {"name": config})
        if config.data_type == types.BOOLEAN and self.number not in (0, 1):
            raise ValidationError(_("%(name)s is yes or no.") % {"name": config})
        low, high = config.min_value, config.max_value
        if (low is not None and self.number < low) or (high is not None and self.number > high):
            raise ValidationError(_("%(name)s is between %(range)s.") % {"name": config, "range": config.range_label})

    @property
    def value(self) -> float | str | bool:
        """As the API gives it: a number, a category's label, or true / false."""
        if self.label:
            return self.label
        if self.config.data_type == ScoreConfig.DataType.BOOLEAN:
            return bool(self.number)
        return self.number

    @property
    def display(self) -> str:
        """As the pages show it."""
        value = self.value
        if isinstance(value, bool):
            return str(_("Yes") if value else _("No"))
        return f"{value:g}" if isinstance(value, float) else value
