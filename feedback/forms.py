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
