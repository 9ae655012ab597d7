import json

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


class StrategyDecisionForm(forms.Form):
    ACTIONS = [("approve", _("Approve for trial")), ("reject", _("Reject")), ("promote", _("Promote")),
               ("roll_back", _("Roll back"))]  # fmt: skip
    action = forms.ChoiceField(choices=ACTIONS)
    reason = forms.CharField(label=_("Reason"), max_length=2000, required=False)
    trial_fraction = forms.FloatField(
        label=_("Share of matching runs in the treatment arm"), min_value=0.05, max_value=0.95, required=False
    )

    def clean(self) -> dict:
        data = super().clean()
        if data.get("action") in ("reject", "roll_back") and not (data.get("reason") or "").strip():
            self.add_error("reason", _("Say why."))
        return data


class _JSONField(forms.CharField):
    widget = forms.Textarea(attrs={"rows": 4, "spellcheck": "false"})

    def to_python(self, value):
        text = super().to_python(value)
        try:
            return json.loads(text or "null")
        except json.JSONDecodeError as exc:
            raise forms.ValidationError(_("Not valid JSON: %(error)s") % {"error": exc.msg}) from exc


class StrategyEditForm(forms.Form):
    pattern = forms.CharField(label=_("Pattern"), max_length=4000, widget=forms.Textarea(attrs={"rows": 2}))
    old_behaviour = forms.CharField(
        label=_("Old behaviour"), max_length=4000, required=False, widget=forms.Textarea(attrs={"rows": 2})
    )
    new_guidance = forms.CharField(label=_("New guidance"), max_length=4000, widget=forms.Textarea(attrs={"rows": 3}))
    condition = _JSONField(label=_("Applicable condition (JSON)"), max_length=4000, required=False)
    guardrails = _JSONField(label=_("Guardrails (JSON list)"), max_length=8000, required=False)
    worked_example = forms.CharField(
        label=_("Worked example"), max_length=4000, required=False, widget=forms.Textarea(attrs={"rows": 4})
    )
    reason = forms.CharField(label=_("Why this edit"), max_length=2000, required=False)

    def clean_condition(self):
        from feedback.strategies.conditions import check_condition

        value = self.cleaned_data["condition"] or {}
        problems = check_condition(value)
        if problems:
            raise forms.ValidationError(problems)
        return value

    def clean_guardrails(self):
        from feedback.agent.guardrails import check_guardrails

        value = self.cleaned_data["guardrails"] or []
        problems = check_guardrails(value)
        if problems:
            raise forms.ValidationError(problems)
        return value


class MiningScheduleForm(forms.Form):
    every_minutes = forms.IntegerField(label=_("Mine failures every (minutes)"), min_value=1, max_value=7 * 24 * 60)
