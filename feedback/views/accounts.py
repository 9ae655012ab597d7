"""The account pages that need more than Django's auth views: a login that says when it is
throttled, a password reset whose mails are limited and that lifts the account's lockout, and the
answer to a request that was refused."""

import math

from django.contrib.auth import views as auth_views
from django.core.exceptions import NON_FIELD_ERRORS
from django.http import HttpRequest, HttpResponse, HttpResponseForbidden, HttpResponseRedirect
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views import defaults

from feedback import throttle
from feedback.forms import LoginForm


class LoginView(auth_views.LoginView):
    authentication_form = LoginForm

    def form_invalid(self, form: LoginForm) -> HttpResponse:
        response = super().form_invalid(form)
        until = getattr(self.request, throttle.LOCKED_UNTIL, None)
        if until is not None and form.has_error(NON_FIELD_ERRORS, "locked"):
            # The login page still, with its message; the status says the same to a script.
            response.status_code = 429
            response["Retry-After"] = str(max(1, math.ceil((until - timezone.now()).total_seconds())))
        return response


class PasswordResetView(auth_views.PasswordResetView):
    def form_valid(self, form) -> HttpResponse:
        address = throttle.client_address(self.request)
        if throttle.reset_mail_reserve(email=form.cleaned_data["email"], address=address):
            return super().form_valid(form)
        # Past the limit: the same answer as when a mail went (or no account has the address).
        return HttpResponseRedirect(self.get_success_url())


class PasswordResetConfirmView(auth_views.PasswordResetConfirmView):
    def form_valid(self, form) -> HttpResponse:
        response = super().form_valid(form)
        # Whoever reads the account's mail may set its password, so may log in with it now.
        throttle.login_failures_clear(username=form.user.get_username())
        return response


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    """handler403: the page in the site's layout; to htmx, a short text it does not swap into the
    fragment (static/js/requests.js says it in the page's banner instead)."""
    if getattr(request, "htmx", False):
        return HttpResponseForbidden(_("You are not allowed to do this."), content_type="text/plain; charset=utf-8")
    return defaults.permission_denied(request, exception)
