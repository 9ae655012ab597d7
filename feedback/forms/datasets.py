"""Importing a dataset: a JSONL or CSV file, or its text pasted."""

from django import forms
from django.utils.translation import gettext_lazy as _

from feedback.datasets.imports import MAX_IMPORT_BYTES
from feedback.models import Dataset


class DatasetImportForm(forms.Form):
    name = forms.CharField(
        label=_("Dataset"),
        max_length=Dataset._meta.get_field("name").max_length,
        help_text=_("A new name makes a dataset; an existing one gets a new version."),
    )
    format = forms.ChoiceField(label=_("Format"), choices=[("jsonl", "JSONL"), ("csv", "CSV")])
    file = forms.FileField(label=_("File"), required=False)
    content = forms.CharField(
        label=_("Or paste its text"), required=False, widget=forms.Textarea(attrs={"rows": 6, "spellcheck": "false"})
    )

    def clean(self) -> dict:
        data = super().clean()
        upload, text = data.get("file"), data.get("content") or ""
        if upload is not None:
            if upload.size > MAX_IMPORT_BYTES:
                raise forms.ValidationError(_("The file is larger than %(n)s bytes.") % {"n": MAX_IMPORT_BYTES})
            try:
                text = upload.read().decode("utf-8-sig")
            except UnicodeDecodeError as exc:
                raise forms.ValidationError(_("The file is not UTF-8 text.")) from exc
        if not text.strip():
            raise forms.ValidationError(_("Choose a file or paste its text."))
        data["text"] = text
        return data
