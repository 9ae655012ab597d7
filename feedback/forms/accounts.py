"""Login and API tokens."""

import math
from datetime import datetime, timedelta

from django import forms
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import ValidationError
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from feedback import throttle
from feedback.models import ApiToken


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

    EXPIRY_DAYS = [
        ("7", _("7 days")),
        ("30", _("30 days")),
        ("90", _("90 days")),
        ("365", _("1 year")),
        ("", _("Never")),
    ]

    name = forms.CharField(
        label=_("Name"), max_length=100, help_text=_("What it is for, e.g. “nightly evaluation script”.")
    )
    scope = forms.ChoiceField(
        label=_("Access"),
        choices=ApiToken.Scope.choices,
        initial=ApiToken.Scope.READ,
        widget=forms.RadioSelect,
        help_text=_(
            "A read-only token lists and reads; read and write also submits, scores and decides, "
            "as far as your account may."
        ),
    )
    expires = forms.ChoiceField(label=_("Expires after"), choices=EXPIRY_DAYS, initial="90", required=False)

    def clean_name(self) -> str:
        name = self.cleaned_data["name"].strip()
        if not name:
            raise forms.ValidationError(_("Give the token a name."))
        return name

    def expires_at(self) -> datetime | None:
        days = self.cleaned_data.get("expires")
        return timezone.now() + timedelta(days=int(days)) if days else None
