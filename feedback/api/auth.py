"""Who is calling: ``Authorization: Bearer <token>`` on every request (no session, so no CSRF:
a browser never sends the header on its own). The token acts as its user, with the user's
permissions, narrowed to reading by a read-only scope (``require_write``).

Before the token is looked at, the client's address is checked against its failed
authentications (``API_AUTH_FAILURE_LIMIT``, throttles.AuthFailureThrottle); past the limit every
request from it is refused with 429, good tokens included, so guessing tells nothing. After it,
the NinjaAPI's throttle counts the token's own requests (``API_RATE_LIMIT``).
"""

from django.contrib.auth.models import AbstractBaseUser
from django.http import HttpRequest
from django.utils.translation import gettext as _
from ninja.security.http import HttpAuthBase

from feedback.models import ApiToken

from .errors import ApiError, throttled, unauthorized
from .throttles import AuthFailureThrottle
from .tokens import TokenRefused, api_token_authenticate

# Longer than any token we make: anything longer is refused unread.
MAX_TOKEN_LENGTH = 200

AUTH_FAILURES = AuthFailureThrottle()


class BearerToken(HttpAuthBase):
    openapi_scheme = "bearer"

    def __call__(self, request: HttpRequest) -> ApiToken:
        if (wait := AUTH_FAILURES.refusal(request)) is not None:
            raise throttled(wait)
        header = request.headers.get("Authorization", "").strip()
        if not header:
            # No credentials is no guess: it is not counted against the address.
            raise unauthorized(_("Send a token: Authorization: Bearer <token>."))
        try:
            return api_token_authenticate(_bearer(header))
        except TokenRefused as refused:
            AUTH_FAILURES.record(request)
            raise unauthorized(str(refused)) from None


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
