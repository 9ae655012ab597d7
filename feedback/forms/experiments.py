"""Starting a paired experiment: a dataset version, the change and how often each item runs."""

import json

from django import forms
from django.utils.translation import gettext_lazy as _

from feedback.models import DatasetItem, DatasetVersion, Experiment, Strategy


class DatasetVersionField(forms.ModelChoiceField):
    def label_from_instance(self, obj: DatasetVersion) -> str:
        return f"{obj.dataset.name} v{obj.number}"


class ExperimentForm(forms.Form):
    dataset_version = DatasetVersionField(
        label=_("Dataset version"),
        queryset=DatasetVersion.objects.select_related("dataset").order_by("dataset__name", "-number"),
    )
    split = forms.ChoiceField(
        label=_("Items"), required=False, choices=[("", _("Every item")), *DatasetItem.Split.choices]
    )
    repeats = forms.IntegerField(
        label=_("Runs of each item per arm"), min_value=1, max_value=5, initial=1,
        help_text=_("More than one evens out a model that answers differently each time."),
    )  # fmt: skip
    change_kind = forms.ChoiceField(label=_("Change"), choices=Experiment.Change.choices)
    strategy = forms.ModelChoiceField(
        label=_("Strategy"),
        required=False,
        queryset=Strategy.objects.filter(status=Strategy.Status.PROPOSED).exclude(current_version=None),
    )
    guidance = forms.CharField(
        label=_("Guidance added to the base prompt"), required=False, max_length=4000,
        widget=forms.Textarea(attrs={"rows": 3}),
    )  # fmt: skip
    guardrails = forms.CharField(
        label=_("Guardrails (JSON list)"), required=False, max_length=4000,
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false"}),
        help_text=_('For example [{"type": "tool_disabled", "tool": "http_get"}]'),
    )  # fmt: skip
    model = forms.CharField(label=_("Model of the treatment arm"), required=False, max_length=200)

    def clean(self) -> dict:
        data = super().clean()
        kind = data.get("change_kind")
        needed = {
            Experiment.Change.STRATEGY: ("strategy", _("Choose the proposed strategy to test.")),
            Experiment.Change.GUIDANCE: ("guidance", _("Write the guidance the treatment arm gets.")),
            Experiment.Change.GUARDRAILS: ("guardrails", _("Give the guardrails as a JSON list.")),
            Experiment.Change.MODEL: ("model", _("Name the model the treatment arm uses.")),
        }
        if kind in needed:
            field, message = needed[kind]
            if not data.get(field):
                self.add_error(field, message)
        if kind == Experiment.Change.GUARDRAILS and data.get("guardrails"):
            try:
                data["guardrail_rules"] = json.loads(data["guardrails"])
            except ValueError as exc:
                self.add_error("guardrails", _("Not JSON: %(why)s") % {"why": exc})
        return data

    def change(self) -> dict:
        data = self.cleaned_data
        return {
            Experiment.Change.GUIDANCE: {"guidance": data.get("guidance")},
            Experiment.Change.GUARDRAILS: {"guardrails": data.get("guardrail_rules")},
            Experiment.Change.MODEL: {"model": data.get("model")},
        }.get(data["change_kind"], {})
