"""The API tokens page: a person's own tokens, made here (shown once) and revoked here."""

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from feedback.api import tokens
from feedback.forms import ApiTokenForm
from feedback.models import ApiToken


@never_cache
def api_token_list(request: HttpRequest) -> HttpResponse:
    """Any signed-in person may have tokens: a token can do what its account can, no more."""
    form = ApiTokenForm(request.POST or None)
    new_token = None
    if request.method == "POST" and form.is_valid():
        # Rendered in this answer, never redirected to (never_cache: no copy kept on the way): the
        # token is not stored anywhere it could be shown from again.
        new_token = tokens.api_token_create(
            user=request.user,
            name=form.cleaned_data["name"],
            scope=form.cleaned_data["scope"],
            expires_at=form.expires_at(),
        )
        form = ApiTokenForm()
    context = {
        "form": form,
        "new_token": new_token,
        "tokens": ApiToken.objects.filter(user=request.user).order_by("revoked_at", "-created_at", "-id"),
    }
    invalid = request.method == "POST" and new_token is None
    return render(request, "feedback/api_tokens.html", context, status=400 if invalid else 200)


@require_POST
def api_token_revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    # Another person's token is not found here (the admin revokes anyone's).
    token = get_object_or_404(ApiToken, pk=token_id, user=request.user)
    if tokens.api_token_revoke(token=token, user=request.user):
        messages.success(request, _("The token “%(name)s” is revoked: it no longer works.") % {"name": token.name})
    else:
        messages.info(request, _("The token “%(name)s” was already revoked.") % {"name": token.name})
    return redirect("feedback-api-tokens")
