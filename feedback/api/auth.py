"""Who is calling: ``Authorization: Bearer <token>`` on every request (no session, so no CSRF:
a browser never sends the header on its own). The token acts as its user, with the user's
permissions, narrowed to reading by a read-only scope (``require_write``).

Before the token is looked at, the client's address is checked against its failed
authentications (``API_AUTH_FAILURE_LIMIT``); past the limit every request from it is refused
with 429 until the window ends, good tokens included, so guessing tells nothing. After it, the
token's own requests are counted (``API_RATE_LIMIT``).
"""

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest
from django.utils.translation import gettext as _
from ninja.security.http import HttpAuthBase

from feedback.models import ApiToken
from feedback.throttle import client_address

from . import limits
from .errors import ApiError, throttled, unauthorized
from .tokens import TokenRefused, api_token_authenticate

# Longer than any token we make: anything longer is refused unread.
MAX_TOKEN_LENGTH = 200


LIMIT_SETTINGS = ("API_RATE_LIMIT", "API_AUTH_FAILURE_LIMIT")


def _rate(setting: str) -> limits.Rate | None:
    return limits.parse_rate(getattr(settings, setting), setting=setting)


@checks.register(checks.Tags.security)
def check_limits(**kwargs) -> list[checks.CheckMessage]:
    """A limit that cannot be read stops the server at start (manage.py check, runserver,
    migrate), not at the first API request."""
    problems = []
    for setting in LIMIT_SETTINGS:
        try:
            _rate(setting)
        except ImproperlyConfigured as error:
            problems.append(checks.Error(str(error), id="feedback.E001"))
    return problems


class BearerToken(HttpAuthBase):
    openapi_scheme = "bearer"

    def __call__(self, request: HttpRequest) -> ApiToken:
        address = client_address(request)
        failures = _rate("API_AUTH_FAILURE_LIMIT")
        if failures is not None and (wait := limits.exceeded(f"auth-failures:{address}", failures)):
            raise throttled(wait)
        header = request.headers.get("Authorization", "").strip()
        if not header:
            # No credentials is no guess: it is not counted against the address.
            raise unauthorized(_("Send a token: Authorization: Bearer <token>."))
        try:
            token = api_token_authenticate(_bearer(header))
        except TokenRefused as refused:
            if failures is not None:
                limits.count(f"auth-failures:{address}", failures)
            raise unauthorized(str(refused)) from None
        rate = _rate("API_RATE_LIMIT")
        if rate is not None and (wait := limits.count(f"token:{token.pk}", rate)):
            raise throttled(wait)
        return token


def _bearer(header: str) -> str:
    """The token of an ``Authorization: Bearer <token>`` header; TokenRefused for anything else."""
    scheme, _space, raw = header.partition(" ")
    raw = raw.strip()
    if scheme.lower() != "bearer" or not raw or len(raw) > MAX_TOKEN_LENGTH:
        raise TokenRefused(_("The token is not valid."))
    return raw


def token_of(request: HttpRequest) -> ApiToken:
    return request.auth


def user_of(request: HttpRequest) -> AbstractBaseUser:
    return request.auth.user


def require_write(request: HttpRequest) -> AbstractBaseUser:
    """The caller, if their token may change things; 403 for a read-only token."""
    token = token_of(request)
    if token.scope != ApiToken.Scope.WRITE:
        raise ApiError(403, _("This token is read-only: make a read-and-write token to change things."))
    return token.user


def require_perm(user: AbstractBaseUser, perm: str) -> None:
    if not user.has_perm(perm):
        raise ApiError(403, _("Your account may not do this."))
