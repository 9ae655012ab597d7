"""The task form and its uploads."""

import re
import unicodedata

from django import forms
from django.contrib.auth.models import AbstractBaseUser
from django.core.files.uploadedfile import UploadedFile
from django.utils.translation import gettext_lazy as _

from feedback import quota
from feedback.cron import MIN_GAP_MINUTES, CronError, check_schedule
from feedback.models import Task, Workspace
from feedback.selectors import workspaces_usable_by

# Uploads go into the run's workspace, where the agent's text tools read them.
UPLOAD_MAX_BYTES = 1024 * 1024
UPLOAD_MAX_FILES = 10
UPLOAD_EXTENSIONS = (".txt", ".md", ".csv", ".json", ".log")
# Plain names only: no folders, no hidden files, nothing the sandbox would have to decode.
SAFE_NAME = re.compile(r"^\w[\w .-]{0,99}$")
ERROR_SIGNATURE = r"^[0-9a-f]{4,40}$"  # a prefix of a step's error signature (sha1 hex)

# Per kind: what the form says about it and the example it shows (swapped in by htmx when the
# kind changes). Kinds without an entry use "general".
KIND_HELP = {
    Task.Kind.FILE_ANALYSIS: (
        _("Name the file(s) to read; pick a workspace or upload the files below."),
        _("e.g. Summarise report.txt and count its words"),
    ),
    Task.Kind.ARITHMETIC: (
        _("Write the expression or the word problem; the calculator computes it exactly."),
        _("e.g. What is (17 * 23 + 4) / 5?"),
    ),
    Task.Kind.EMAIL_TRIAGE: (
        _("Say which folder holds the emails and what to flag; replies need a reviewer's confirmation."),
        _("e.g. Classify the emails in inbox/ and flag the urgent ones"),
    ),
    Task.Kind.GENERAL: (
        _("Anything else: describe the goal and what a good answer contains."),
        _("e.g. List the files in the workspace and describe each in one line"),
    ),
}


def kind_help(kind: str) -> tuple[str, str]:
    return KIND_HELP.get(kind, KIND_HELP[Task.Kind.GENERAL])


class MultipleFileInput(forms.ClearableFileInput):
    allow_multiple_selected = True


class MultipleFileField(forms.FileField):
    """Several files in one field (the pattern from Django's documentation)."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("widget", MultipleFileInput(attrs={"accept": ",".join(UPLOAD_EXTENSIONS)}))
        super().__init__(*args, **kwargs)

    def clean(self, data, initial=None) -> list[UploadedFile]:
        single = super().clean
        if isinstance(data, (list, tuple)):
            return [single(d, initial) for d in data]
        return [single(data, initial)] if data else []


def check_upload(upload: UploadedFile) -> None:
    """A text file of an allowed type and size, by its name AND its content: a renamed binary
    (an image called notes.txt) is refused too."""
    name = upload.name or ""
    if not SAFE_NAME.match(name) or not name.lower().endswith(UPLOAD_EXTENSIONS):
        raise forms.ValidationError(
            _("%(name)s: only %(types)s files are accepted."),
            params={"name": name, "types": ", ".join(UPLOAD_EXTENSIONS)},
        )
    if upload.size > UPLOAD_MAX_BYTES:
        raise forms.ValidationError(_("%(name)s is larger than 1 MB."), params={"name": name})
    head = upload.read(UPLOAD_MAX_BYTES + 1)
    upload.seek(0)
    try:
        head.decode("utf-8")
    except UnicodeDecodeError:
        raise forms.ValidationError(_("%(name)s is not UTF-8 text."), params={"name": name}) from None
    if b"\x00" in head:
        raise forms.ValidationError(_("%(name)s is not a text file."), params={"name": name})


def _upload_key(name: str) -> str:
    """The file a name becomes in the workspace (the sandbox strips it), whatever the case or the
    Unicode form: on macOS's and Windows' file systems "Notes.txt" and "notes.txt" are one file.
    (Django has already reduced "a/../b.txt" to "b.txt".)"""
    return unicodedata.normalize("NFC", name.strip()).casefold()


def _duplicate_upload(name: str, first: str) -> forms.ValidationError:
    if name == first:
        return forms.ValidationError(
            _("%(name)s is uploaded twice: each file needs its own name."), params={"name": name}
        )
    return forms.ValidationError(
        _("%(name)s and %(first)s would be one file in the workspace: each file needs its own name."),
        params={"name": name, "first": first},
    )


class TaskForm(forms.Form):
    # Defaults that succeed: a newcomer who types the placeholder's task and submits gets a run that
    # answers it (file analysis in the shared demo workspace), not a general task with no files.
    kind = forms.ChoiceField(label=_("Kind"), choices=Task.Kind.choices, initial=Task.Kind.FILE_ANALYSIS)
    text = forms.CharField(
        label=_("Task"),
        max_length=Task.TEXT_MAX_LENGTH,
        widget=forms.Textarea(attrs={"rows": 4, "placeholder": _("e.g. Summarise report.txt and count its words")}),
    )
    workspace = forms.ModelChoiceField(
        label=_("Workspace"),
        queryset=Workspace.objects.filter(owner=None),  # per user: see __init__
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

    files = MultipleFileField(
        label=_("Files (optional)"),
        required=False,
        help_text=_("Up to 10 text files (.txt .md .csv .json .log), 1 MB each, added to the run's workspace."),
    )
    repeat = forms.ChoiceField(
        label=_("Repeat"),
        required=False,
        choices=[
            ("", _("Run once")),
            ("minutes", _("Every N minutes")),
            ("hours", _("Every N hours")),
            ("cron", _("On a cron schedule")),
        ],
    )
    every = forms.IntegerField(label=_("Every N"), required=False, min_value=1, max_value=10_000)
    cron = forms.CharField(
        label=_("Cron expression"),
        required=False,
        max_length=100,
        widget=forms.TextInput(attrs={"placeholder": "0 7 * * 1-5"}),
        help_text=_("Minute hour day-of-month month day-of-week, in UTC."),
    )

    def __init__(self, *args, user: AbstractBaseUser | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.user = user
        if user is not None:
            # Another person's uploads are neither offered nor accepted (nor by services.task_submit).
            field = self.fields["workspace"]
            field.queryset = workspaces_usable_by(user)
            field.label_from_instance = _workspace_label
        if not self.is_bound and "workspace" not in self.initial:
            shared = Workspace.objects.filter(owner=None)
            self.initial["workspace"] = (shared.filter(name="demo").first() or shared.first() or Workspace()).pk

    def clean_files(self) -> list[UploadedFile]:
        files = self.cleaned_data.get("files") or []
        if len(files) > UPLOAD_MAX_FILES:
            raise forms.ValidationError(_("At most 10 files at a time."))
        errors, names = [], {}
        for upload in files:
            try:
                check_upload(upload)
            except forms.ValidationError as error:
                errors.append(error)
            # The second of two files of one name would replace the first in the workspace.
            name, key = upload.name or "", _upload_key(upload.name or "")
            if key in names:
                errors.append(_duplicate_upload(name, names[key]))
            names.setdefault(key, name)
        if errors:
            raise forms.ValidationError(errors)
        return files

    def clean(self) -> dict:
        data = super().clean()
        repeat = data.get("repeat")
        if repeat in ("minutes", "hours") and not data.get("every"):
            self.add_error("every", _("Say how often the task repeats."))
        if repeat == "minutes" and (data.get("every") or MIN_GAP_MINUTES) < MIN_GAP_MINUTES:
            self.add_error("every", _("A task repeats at most every 5 minutes."))
        if repeat == "cron":
            try:
                check_schedule(data.get("cron", ""))
            except CronError as error:
                # Which field, which value and why: "Minute 99 is out of range 0-59."
                self.add_error("cron", str(error))
        if self.user is not None and not self.errors:
            try:
                quota.check_submission(user=self.user, workspace=data.get("workspace"), files=data.get("files") or [])
            except quota.QuotaExceeded as error:
                self.add_error(None, str(error))
        return data

    def clean_text(self) -> str:
        text = self.cleaned_data["text"].strip()
        if len(text) < 5:
            raise forms.ValidationError(_("Describe the task in at least 5 characters."))
        if "\x00" in text:
            raise forms.ValidationError(_("The task contains a NUL character."))
        return text


def _workspace_label(workspace: Workspace) -> str:
    if workspace.owner is None:
        return workspace.name
    return _("%(name)s (uploads of %(user)s)") % {"name": workspace.name, "user": workspace.owner.get_username()}
