"""The playground's edit of one run: its system prompt, or guidance (a strategy's, edited)."""

from django import forms
from django.utils.translation import gettext_lazy as _

from feedback.models import Strategy
from feedback.playground import MAX_PROMPT


class PlaygroundForm(forms.Form):
    system_prompt = forms.CharField(
        label=_("System prompt"), required=False, max_length=MAX_PROMPT,
        widget=forms.Textarea(attrs={"rows": 12, "spellcheck": "false"}),
        help_text=_("Edit it to replace the whole prompt; left as it was, it is built as production would now."),
    )  # fmt: skip
    strategy = forms.ModelChoiceField(
        label=_("Strategy whose guidance you edit"),
        required=False,
        queryset=Strategy.objects.exclude(current_version=None).exclude(
            status__in=[Strategy.Status.REJECTED, Strategy.Status.ROLLED_BACK]
        ),
    )
    guidance = forms.CharField(
        label=_("Guidance"), required=False, max_length=MAX_PROMPT, widget=forms.Textarea(attrs={"rows": 4}),
        help_text=_("Added as a lesson; with a strategy chosen, it replaces that strategy's guidance."),
    )  # fmt: skip
    note = forms.CharField(label=_("Note (what you are trying)"), required=False, max_length=200)

    def _lines(self, name: str) -> str:
        # A browser sends a textarea's lines ending in CRLF: the prompt left as it was would
        # otherwise differ from the run's, and count as an edit.
        return self.cleaned_data[name].replace("\r\n", "\n")

    def clean_system_prompt(self) -> str:
        return self._lines("system_prompt")

    def clean_guidance(self) -> str:
        return self._lines("guidance")
