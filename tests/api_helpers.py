"""Calling the JSON API in tests: tokens for users, and requests that carry them."""

import json
from datetime import timedelta

from django.test import Client
from django.utils import timezone

from feedback.api.tokens import api_token_create
from feedback.models import ApiToken

API = "/api/v1"


def token_for(user, *, scope: str = ApiToken.Scope.WRITE, revoked: bool = False, expired: bool = False) -> str:
    expires_at = timezone.now() - timedelta(seconds=1) if expired else None
    new = api_token_create(user=user, name=f"{user.get_username()} {scope}", scope=scope, expires_at=expires_at)
    if revoked:
        ApiToken.objects.filter(pk=new.token.pk).update(revoked_at=timezone.now())
    return new.raw


def call(client: Client, method: str, path: str, *, token: str | None = None, body=None, raw: str | None = None):
    """``method`` on ``API + path`` with ``token`` as its bearer, ``body`` as JSON (``raw``: as it is)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    kwargs = {}
    if body is not None or raw is not None:
        kwargs = {"data": raw if raw is not None else json.dumps(body), "content_type": "application/json"}
    return getattr(client, method.lower())(API + path, headers=headers, **kwargs)
