"""The filters of the run list, the run comparison, the metrics and the alerts."""

from django import forms
from django.db.models import Exists, OuterRef
from django.utils.translation import gettext_lazy as _

from feedback.agent.tools import BUILTIN_TOOLS
from feedback.models import AlertIncident, AlertRule, AppliedStrategy, Run, Strategy, Task

from .tasks import ERROR_SIGNATURE


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
        label=_("Error signature"),
        required=False,
        regex=ERROR_SIGNATURE,
        max_length=40,
        error_messages={"invalid": _("An error signature is 4 to 40 hex digits.")},
    )
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
        # The strategies applied to a run at least once, the only ones the filter can find runs of
        # (mining proposes more every hour: most are never applied); only what an option shows.
        applied = AppliedStrategy.objects.filter(AppliedStrategy.APPLIED, strategy_version__strategy=OuterRef("pk"))
        self.fields["strategy"].queryset = Strategy.objects.filter(Exists(applied)).order_by("id").only("id", "title")


class AlertFilterForm(forms.Form):
    """The alert history's filters (a GET form: a filtered history is a shareable URL)."""

    state = forms.ChoiceField(label=_("State"), required=False, choices=[("", _("Any")), *AlertIncident.State.choices])
    rule = forms.ModelChoiceField(
        label=_("Rule"), required=False, queryset=AlertRule.objects.none(), empty_label=_("Any")
    )

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)
        self.fields["rule"].queryset = AlertRule.objects.order_by("name", "id")
