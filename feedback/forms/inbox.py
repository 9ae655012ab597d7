"""The reviewer inbox's filter and its proposal decision (runs and confirmations keep their own
forms: HumanScoreForm and ConfirmationForm)."""

from django import forms
from django.utils.translation import gettext_lazy as _

from feedback.models import InboxClaim
from feedback.selectors.inbox import REASONS, inbox_strategies

from .review import StrategyDecisionForm


class InboxFilterForm(forms.Form):
    kind = forms.ChoiceField(label=_("Kind"), required=False, choices=[("", _("All kinds")), *InboxClaim.Kind.choices])
    reason = forms.ChoiceField(
        label=_("Reason"), required=False, choices=[("", _("All reasons")), *[(k, v) for k, v in REASONS.items()]]
    )
    strategy = forms.TypedChoiceField(label=_("Strategy"), required=False, coerce=int, empty_value=None)

    def __init__(self, *args, **kwargs) -> None:
        # Its own ids: the item's decision form on the same page has a "reason" too.
        kwargs.setdefault("auto_id", "inbox-filter-%s")
        super().__init__(*args, **kwargs)
        # Built per request: strategies come and go (a title is the strategy's own, escaped on output).
        self.fields["strategy"].choices = [("", _("All strategies"))] + [
            (s.pk, f"#{s.pk} {s.title}") for s in inbox_strategies()
        ]

    def filters(self) -> dict:
        """The valid filters (an invalid value is dropped, not an error: it is a link's query; the
        other filters still apply)."""
        self.is_valid()
        data = self.cleaned_data
        return {"kind": data.get("kind", ""), "reason": data.get("reason", ""), "strategy_id": data.get("strategy")}


class ProposalDecisionForm(StrategyDecisionForm):
    """What a proposal can become from the inbox: approved for trial, or rejected (promotions and
    roll-backs read a trial's figures, on the strategy's own page)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["action"].choices = StrategyDecisionForm.ACTIONS[:2]
