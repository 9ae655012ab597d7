"""A reviewer's forms: confirmations, scores, strategy decisions and edits, the mining schedule."""

import json

from django import forms
from django.utils.translation import gettext_lazy as _

from feedback.agent.guardrails import check_guardrails
from feedback.models import Run, ScoreConfig, ScoreValue, Task
from feedback.storable import validate_storable_json
from feedback.strategies.conditions import check_condition


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

    def __init__(self, *args, configs: list[ScoreConfig] | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # The operators' live score configurations (Settings → Scores), after the fixed fields;
        # ``configs`` when the caller has read them already.
        self.score_configs = list(ScoreConfig.objects.filter(archived=False)) if configs is None else configs
        for config in self.score_configs:
            self.fields[config_field_name(config)] = score_config_field(config)

    def clean(self) -> dict:
        data = super().clean()
        values = []
        for config in self.score_configs:
            given = data.pop(config_field_name(config), None)
            if given is None or given == "":
                continue
            if config.data_type == ScoreConfig.DataType.CATEGORICAL:
                values.append(ScoreValue(config=config, label=given))
            else:
                values.append(ScoreValue(config=config, number=float(given)))
        data["score_values"] = values
        return data


def config_field_name(config: ScoreConfig) -> str:
    return f"config_{config.pk}"


def score_config_field(config: ScoreConfig) -> forms.Field:
    """The form field a configuration asks for: a bounded number, one of its categories, or yes / no."""
    common = {"label": config.name, "required": config.required, "help_text": config.description}
    if config.data_type == ScoreConfig.DataType.CATEGORICAL:
        choices = [("", "—"), *((c, c) for c in config.categories)]
        return forms.ChoiceField(choices=choices, **common)
    if config.data_type == ScoreConfig.DataType.BOOLEAN:
        choices = [("", "—"), ("1", _("Yes")), ("0", _("No"))]
        return forms.TypedChoiceField(choices=choices, coerce=int, empty_value=None, **common)
    # The bounds become the input's min and max, so the browser checks them as the form does.
    return forms.FloatField(min_value=config.min_value, max_value=config.max_value, **common)


class StrategyDecisionForm(forms.Form):
    ACTIONS = [
        ("approve", _("Approve for trial")),
        ("reject", _("Reject")),
        ("promote", _("Promote")),
        ("promote_override", _("Promote against the verdict")),
        ("roll_back", _("Roll back")),
    ]
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
    new_guidance = forms.CharField(
        label=_("New guidance"),
        max_length=4000,
        required=False,
        help_text=_("May be empty when a guardrail or a worked example is the change."),
        widget=forms.Textarea(attrs={"rows": 3}),
    )
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
