"""The forms of the Settings pages: alert rules, MCP servers, model prices, tool settings and
score configurations.

Each is a ModelForm, so the model's own checks (``clean()``: an alert rule's thresholds, an MCP
server's transport and JSON shapes) run on what was typed, and a form with errors is shown again
with every value as it was typed.
"""

import json

from django import forms
from django.core.validators import MaxValueValidator, MinValueValidator
from django.utils.translation import gettext_lazy as _

from feedback.models import AlertRule, McpServer, ModelPrice, ScoreConfig, ToolSetting


class AlertRuleForm(forms.ModelForm):
    class Meta:
        model = AlertRule
        fields = [
            "name",
            "kind",
            "enabled",
            "task_kind",
            "window_minutes",
            "threshold",
            "change",
            "error_measure",
            "min_runs",
            "queued_minutes",
            "heartbeat_minutes",
            "confirmation_minutes",
            "webhook_urls",
            "emails",
        ]
        widgets = {"webhook_urls": forms.Textarea(attrs={"rows": 3}), "emails": forms.Textarea(attrs={"rows": 3})}


class JsonTextField(forms.JSONField):
    """JSON typed in a text box, shown back compact on one line when it is short."""

    def __init__(self, **kwargs) -> None:
        kwargs.setdefault("widget", forms.Textarea(attrs={"rows": 2}))
        super().__init__(**kwargs)

    def prepare_value(self, value):
        if isinstance(value, forms.fields.InvalidJSONInput):
            return value  # what was typed, as it was typed
        return json.dumps(value, ensure_ascii=False)


class McpServerForm(forms.ModelForm):
    args = JsonTextField(label=_("arguments"), required=False, help_text=McpServer._meta.get_field("args").help_text)
    env = JsonTextField(label=_("environment"), required=False, help_text=McpServer._meta.get_field("env").help_text)
    headers = JsonTextField(
        label=_("headers"), required=False, help_text=McpServer._meta.get_field("headers").help_text
    )
    expose = JsonTextField(
        label=_("tools to expose"), required=False, help_text=McpServer._meta.get_field("expose").help_text
    )

    class Meta:
        model = McpServer
        fields = [
            "name",
            "enabled",
            "transport",
            "command",
            "args",
            "env",
            "url",
            "headers",
            "timeout_seconds",
            "expose",
        ]

    def clean(self) -> dict:
        data = super().clean()
        # An empty box is an empty list or object, as the model's defaults are.
        for name, empty in (("args", list), ("env", dict), ("headers", dict), ("expose", list)):
            if name in data and data[name] in (None, ""):
                data[name] = empty()
        return data


class ModelPriceForm(forms.ModelForm):
    class Meta:
        model = ModelPrice
        fields = ["model_name", "input_per_million", "output_per_million", "effective_from", "note"]
        widgets = {
            "effective_from": forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
        }

    def clean_input_per_million(self):
        return _not_negative(self.cleaned_data["input_per_million"])

    def clean_output_per_million(self):
        return _not_negative(self.cleaned_data["output_per_million"])


def _not_negative(value):
    if value is not None and value < 0:
        raise forms.ValidationError(_("A price is 0 or more."))
    return value


class ToolSettingForm(forms.ModelForm):
    timeout_seconds = forms.FloatField(
        label=_("timeout (s)"),
        required=False,
        validators=[MinValueValidator(0.1), MaxValueValidator(600)],
        help_text=_("Empty: the tool's own."),
    )

    class Meta:
        model = ToolSetting
        fields = ["enabled", "timeout_seconds"]
        labels = {"enabled": _("enabled")}


class CategoriesField(forms.CharField):
    """A categorical score's labels, one per line, kept in the order typed."""

    widget = forms.Textarea(attrs={"rows": 4})

    def prepare_value(self, value):
        return "\n".join(value) if isinstance(value, list) else value

    def to_python(self, value) -> list[str]:
        labels = []
        for line in (super().to_python(value) or "").splitlines():
            label = line.strip()
            if len(label) > ScoreConfig.CATEGORY_MAX_LENGTH:
                raise forms.ValidationError(
                    _("A category has at most %(n)d characters.") % {"n": ScoreConfig.CATEGORY_MAX_LENGTH}
                )
            if label and label not in labels:
                labels.append(label)
        return labels


class ScoreConfigForm(forms.ModelForm):
    categories = CategoriesField(
        label=_("categories"), required=False, help_text=_("Categories only: one per line, in the order shown.")
    )

    class Meta:
        model = ScoreConfig
        fields = ["name", "description", "data_type", "min_value", "max_value", "categories", "required", "archived"]
