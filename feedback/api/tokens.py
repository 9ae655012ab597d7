"""API tokens: made and revoked by their owner (the API tokens page) or an administrator (the
admin), and checked on every API request.

A token is ``afb_`` and 43 URL-safe characters (256 random bits). It is shown once, when it is
made; the database keeps its SHA-256 and its first characters (to tell tokens apart), never the
token itself. The privacy masking (feedback/privacy.py) recognises the ``afb_`` form, so a token
pasted into a task is not stored either.
"""

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext as _

from feedback.models import ApiToken

TOKEN_PREFIX = "afb_"
# How many characters of a token its lists show: "afb_" and 8 of the random part.
SHOWN_CHARACTERS = 12
# last_used_at is written at most this often per token, not on every request.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def token_hash(raw: str) -> str:
    return hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class NewToken:
    token: ApiToken
    # The token itself: shown once, then gone (only its hash is stored).
    raw: str


def issue(token: ApiToken) -> str:
    """A new secret for the unsaved ``token``: its hash and first characters go on the row, the
    secret itself is returned, to be shown once."""
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token.prefix, token.hashed = raw[:SHOWN_CHARACTERS], token_hash(raw)
    return raw


@transaction.atomic
def api_token_create(*, user: AbstractBaseUser, name: str, scope: str, expires_at: datetime | None = None) -> NewToken:
    if scope not in ApiToken.Scope.values:
        raise ValueError(f"Unknown scope {scope!r}.")
    token = ApiToken(user=user, name=name.strip(), scope=scope, expires_at=expires_at)
    raw = issue(token)
    token.save()
    return NewToken(token=token, raw=raw)


def api_token_can_revoke(*, token: ApiToken, user: AbstractBaseUser) -> bool:
    """Its owner, or an administrator who may change tokens (the admin)."""
    return token.user_id == user.pk or user.has_perm("feedback.change_apitoken")


@transaction.atomic
def api_token_revoke(*, token: ApiToken, user: AbstractBaseUser) -> bool:
    """Revoke ``token`` from now on; False if it was revoked already. The row stays, for the list."""
    if not api_token_can_revoke(token=token, user=user):
        raise PermissionDenied
    return bool(ApiToken.objects.filter(pk=token.pk, revoked_at=None).update(revoked_at=timezone.now()))


class TokenRefused(Exception):
    """The request's token does not let anyone in; the message says why (it is no secret: whoever
    sends a revoked or expired token once held it)."""


def api_token_authenticate(raw: str) -> ApiToken:
    """The usable token ``raw`` is, with its user; TokenRefused otherwise. Marks it used."""
    token = ApiToken.objects.select_related("user").filter(hashed=token_hash(raw)).first()
    if token is None:
        raise TokenRefused(_("The token is not valid."))
    if token.revoked_at is not None:
        raise TokenRefused(_("The token was revoked."))
    if token.is_expired:
        raise TokenRefused(_("The token has expired."))
    if not token.user.is_active:
        raise TokenRefused(_("The token's account is deactivated."))
    now = timezone.now()
    if token.last_used_at is None or token.last_used_at < now - LAST_USED_RESOLUTION:
        # Conditional, so a burst of requests on many processes writes the row once.
        ApiToken.objects.filter(pk=token.pk).filter(
            Q(last_used_at=None) | Q(last_used_at__lt=now - LAST_USED_RESOLUTION)
        ).update(last_used_at=now)
    return token
