import json
import math
import re
import unicodedata
from datetime import datetime, timedelta

from django import forms
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import UploadedFile
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from feedback import quota, throttle
from feedback.agent.guardrails import check_guardrails
from feedback.agent.tools import BUILTIN_TOOLS
from feedback.cron import MIN_GAP_MINUTES, CronError, check_schedule
from feedback.models import AlertIncident, AlertRule, ApiToken, Run, Strategy, Task, Workspace
from feedback.selectors import workspaces_usable_by
from feedback.storable import validate_storable_json
from feedback.strategies.conditions import check_condition

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
    kind = forms.ChoiceField(label=_("Kind"), choices=Task.Kind.choices, initial=Task.Kind.GENERAL)
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


class ConfirmationForm(forms.Form):
    decision = forms.ChoiceField(choices=[("approve", _("Approve")), ("reject", _("Reject"))])
    # Optional when approving (a note); a refusal is the model's next observation and an audit
    # record, so it says why.
    reason = forms.CharField(label=_("Reason"), max_length=1000, required=False)

    def clean(self) -> dict:
        data = super().clean()
        if data.get("decision") == "reject" and not (data.get("reason") or "").strip():
            self.add_error("reason", _("Say why you refuse this call."))
        return data


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
    outcome = forms.ChoiceField(
        label=_("Was the task accomplished?"),
        required=False,
        choices=[
            ("", _("Leave it to the evaluators")),
            (Run.Outcome.ACCOMPLISHED, _("Accomplished")),
            (Run.Outcome.NOT_ACCOMPLISHED, _("Not accomplished")),
        ],
        help_text=_("Your verdict outranks the evaluators', as your score does."),
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
               ("promote_override", _("Promote against the verdict")), ("roll_back", _("Roll back"))]  # fmt: skip
    action = forms.ChoiceField(choices=ACTIONS)
    # Every decision has a reason in the audit log (whitespace alone is stripped, so refused too).
    reason = forms.CharField(label=_("Reason"), max_length=2000, error_messages={"required": _("Say why.")})
    trial_fraction = forms.FloatField(
        label=_("Share of matching runs in the treatment arm"), min_value=0.05, max_value=0.95, required=False
    )


class _JSONField(forms.CharField):
    widget = forms.Textarea(attrs={"rows": 4, "spellcheck": "false"})

    def clean(self, value):
        # The text is checked as text (length, NUL) before it is parsed: validators written for
        # strings must never see the parsed number or list.
        text = super().clean(value)
        try:
            parsed = json.loads(text or "null", parse_constant=_no_constant)
        except json.JSONDecodeError as exc:
            raise forms.ValidationError(_("Not valid JSON: %(error)s") % {"error": exc.msg}) from exc
        except (ValueError, RecursionError) as exc:
            raise forms.ValidationError(_("Not valid JSON: %(error)s") % {"error": exc}) from exc
        # The text has no NUL, but "\u0000" in it decodes to one, which PostgreSQL refuses.
        validate_storable_json(parsed)
        return parsed


def _no_constant(name: str) -> None:
    # NaN and Infinity are not JSON, and PostgreSQL's jsonb refuses them.
    raise ValueError(f"{name} is not allowed")


class StrategyEditForm(forms.Form):
    title = forms.CharField(label=_("Title"), max_length=200)
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

        value = self.cleaned_data["condition"] or {}
        problems = check_condition(value)
        if problems:
            raise forms.ValidationError(problems)
        return value

    def clean_guardrails(self):

        value = self.cleaned_data["guardrails"] or []
        problems = check_guardrails(value)
        if problems:
            raise forms.ValidationError(problems)
        return value


class MiningScheduleForm(forms.Form):
    every_minutes = forms.IntegerField(label=_("Mine failures every (minutes)"), min_value=1, max_value=7 * 24 * 60)


class RunCompareForm(forms.Form):
    """The two runs of a comparison, from the URL; the second one is chosen on the page."""

    a = forms.IntegerField(label=_("Run"), min_value=1, max_value=2**63 - 1)
    b = forms.IntegerField(label=_("Compared with run"), min_value=1, max_value=2**63 - 1, required=False)

    def clean(self) -> dict:
        data = super().clean()
        if data.get("a") is not None and data.get("a") == data.get("b"):
            self.add_error("b", _("Choose another run: a run compared with itself shows no difference."))
        return data


class RunFilterForm(forms.Form):
    """The run list's filters; a GET form, so a filtered list is a shareable URL."""

    q = forms.CharField(label=_("Search"), required=False, max_length=200)
    status = forms.ChoiceField(label=_("Status"), required=False, choices=[("", _("Any")), *Run.Status.choices])
    outcome = forms.ChoiceField(label=_("Outcome"), required=False, choices=[("", _("Any")), *Run.Outcome.choices])
    kind = forms.ChoiceField(label=_("Kind"), required=False, choices=[("", _("Any")), *Task.Kind.choices])
    score_min = forms.FloatField(label=_("Score from"), required=False, min_value=0, max_value=1)
    score_max = forms.FloatField(label=_("Score to"), required=False, min_value=0, max_value=1)
    tool = forms.ChoiceField(label=_("Tool used"), required=False)
    error = forms.RegexField(
        label=_("Error signature"), required=False, regex=ERROR_SIGNATURE, max_length=40,
        error_messages={"invalid": _("An error signature is 4 to 40 hex digits.")},
    )  # fmt: skip
    strategy = forms.ModelChoiceField(
        label=_("Strategy applied"), required=False, queryset=Strategy.objects.none(), empty_label=_("Any")
    )
    since = forms.DateField(label=_("From"), required=False, widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(label=_("To"), required=False, widget=forms.DateInput(attrs={"type": "date"}))
    sort = forms.ChoiceField(
        label=_("Sort"),
        required=False,
        choices=[("newest", _("Newest first")), ("oldest", _("Oldest first")), ("score", _("Highest score"))],
    )

    def __init__(self, *args, **kwargs) -> None:

        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)
        self.fields["tool"].choices = [("", _("Any")), *((name, name) for name in sorted(BUILTIN_TOOLS))]
        self.fields["strategy"].queryset = Strategy.objects.order_by("id")


class AlertFilterForm(forms.Form):
    """The alert history's filters (a GET form: a filtered history is a shareable URL)."""

    state = forms.ChoiceField(label=_("State"), required=False, choices=[("", _("Any")), *AlertIncident.State.choices])
    rule = forms.ModelChoiceField(label=_("Rule"), required=False, queryset=AlertRule.objects.none(),
                                  empty_label=_("Any"))  # fmt: skip

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)
        self.fields["rule"].queryset = AlertRule.objects.order_by("name", "id")


class LoginForm(AuthenticationForm):
    """Django's login form, saying so when logins are refused for a while (feedback/throttle.py)."""

    error_messages = {
        **AuthenticationForm.error_messages,
        "invalid_login": _("Your username and password didn't match. Please try again."),
    }

    def get_invalid_login_error(self) -> ValidationError:
        until = getattr(self.request, throttle.LOCKED_UNTIL, None)
        if until is None:
            return super().get_invalid_login_error()
        minutes = max(1, math.ceil((until - timezone.now()).total_seconds() / 60))
        message = ngettext(
            "Too many failed login attempts: logging in is blocked for %(minutes)d minute, "
            "even with the right password.",
            "Too many failed login attempts: logging in is blocked for %(minutes)d minutes, "
            "even with the right password.",
            minutes,
        )
        return ValidationError(message, code="locked", params={"minutes": minutes})


class ApiTokenForm(forms.Form):
    """A new API token (feedback/api/): its name, what it may do, how long it lasts."""

    EXPIRY_DAYS = [("7", _("7 days")), ("30", _("30 days")), ("90", _("90 days")), ("365", _("1 year")),
                   ("", _("Never"))]  # fmt: skip

    name = forms.CharField(
        label=_("Name"), max_length=100, help_text=_("What it is for, e.g. “nightly evaluation script”.")
    )
    scope = forms.ChoiceField(
        label=_("Access"),
        choices=ApiToken.Scope.choices,
        initial=ApiToken.Scope.READ,
        widget=forms.RadioSelect,
        help_text=_("A read-only token lists and reads; read and write also submits, scores and decides, "
                    "as far as your account may."),
    )  # fmt: skip
    expires = forms.ChoiceField(label=_("Expires after"), choices=EXPIRY_DAYS, initial="90", required=False)

    def clean_name(self) -> str:
        name = self.cleaned_data["name"].strip()
        if not name:
            raise forms.ValidationError(_("Give the token a name."))
        return name

    def expires_at(self) -> datetime | None:
        days = self.cleaned_data.get("expires")
        return timezone.now() + timedelta(days=int(days)) if days else None
