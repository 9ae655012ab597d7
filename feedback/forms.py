from django import forms
from django.utils.translation import gettext_lazy as _

from feedback.models import Task, Workspace


class TaskForm(forms.Form):
    kind = forms.ChoiceField(label=_("Kind"), choices=Task.Kind.choices)
    text = forms.CharField(
        label=_("Task"),
        max_length=Task.TEXT_MAX_LENGTH,
        widget=forms.Textarea(attrs={"rows": 4, "placeholder": _("e.g. Summarise report.txt and count its words")}),
    )
    workspace = forms.ModelChoiceField(
        label=_("Workspace"),
        queryset=Workspace.objects.all(),
        required=False,
        help_text=_("The files the run works on; each run gets its own copy."),
    )
    expected_answer = forms.CharField(
        label=_("Expected answer (optional)"),
        max_length=Task.TEXT_MAX_LENGTH,
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text=_("Used to score the run against a reference."),
    )

    def clean_text(self) -> str:
        text = self.cleaned_data["text"].strip()
        if len(text) < 5:
            raise forms.ValidationError(_("Describe the task in at least 5 characters."))
        if "\x00" in text:
            raise forms.ValidationError(_("The task contains a NUL character."))
        return text


class ConfirmationForm(forms.Form):
    decision = forms.ChoiceField(choices=[("approve", _("Approve")), ("reject", _("Reject"))])
    reason = forms.CharField(max_length=1000, required=False)


class HumanScoreForm(forms.Form):
    score = forms.FloatField(
        label=_("Score (0–1)"),
        min_value=0,
        max_value=1,
        widget=forms.NumberInput(attrs={"step": "0.05", "min": "0", "max": "1"}),
    )
    comment = forms.CharField(
        label=_("Comment"), required=False, max_length=4000, widget=forms.Textarea(attrs={"rows": 2})
    )
    corrected_answer = forms.CharField(
        label=_("Corrected answer (optional)"),
        required=False,
        max_length=Task.TEXT_MAX_LENGTH,
        widget=forms.Textarea(attrs={"rows": 2}),
    )


class MetricsFilterForm(forms.Form):
    kind = forms.ChoiceField(label=_("Kind"), required=False, choices=[("", _("Any")), *Task.Kind.choices])
    days = forms.TypedChoiceField(
        label=_("Period"),
        required=False,
        coerce=int,
        empty_value=30,
        choices=[(7, _("7 days")), (30, _("30 days")), (90, _("90 days")), (365, _("365 days"))],
    )
    granularity = forms.ChoiceField(label=_("Per"), required=False, choices=[("day", _("day")), ("week", _("week"))])
