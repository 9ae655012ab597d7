"""``Idempotency-Key``: a client that sends a request again, not knowing whether the first one
arrived (a timeout, a dropped connection), gets the first answer instead of a second run.

As payment APIs do it (Stripe's semantics, the IETF's draft-ietf-httpapi-idempotency-key-header):
the key is the caller's (one account's keys never meet another's); the same key with the same
request within API_IDEMPOTENCY_KEY_HOURS answers what the first request answered, marked
``Idempotent-Replayed: true``, and creates nothing more; the same key with a different request is
refused (422). Only answers that created something are kept: a refused request (400, 403...)
created nothing, so sending it again, corrected, with the same key is a new request.

Requests racing with the same key make one row between them: the key's row is inserted in the
transaction that creates the run, under a unique constraint, so a second insert waits for the
first transaction (PostgreSQL holds it on the index) and then fails, and that request answers
what the first one committed.
"""

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.http import HttpRequest
from django.utils import timezone
from django.utils.translation import gettext as _
from ninja import Schema

from feedback.models import IdempotencyKey

from .errors import ApiError

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
# Visible ASCII, as Stripe takes them (a UUID is the usual choice); at most the column's length.
_KEY = re.compile(r"^[\x21-\x7e]{1,255}$")

# The header in the OpenAPI document of an endpoint that takes it.
OPENAPI_PARAMETER = {
    "name": HEADER,
    "in": "header",
    "required": False,
    "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[\\x21-\\x7e]+$"},
    "description": (
        "Makes a retry safe: the same key with the same body within API_IDEMPOTENCY_KEY_HOURS (24 h) "
        "answers the first request's answer again (with Idempotent-Replayed: true) and creates nothing "
        "more; the same key with another body is 422. Keys are the account's own: a new one (a UUID) "
        "for each new request."
    ),
}


@dataclass(frozen=True)
class Answer:
    status: int
    body: dict
    replayed: bool = False


def key_of(request: HttpRequest) -> str | None:
    """The request's key (None: it sent none); 400 for one that cannot be a key. The draft writes
    the key as a quoted string (``"8e03978e-..."``): the quotes are not part of it."""
    raw = request.headers.get(HEADER)
    if raw is None:
        return None
    key = raw.strip()
    if len(key) >= 2 and key[0] == key[-1] == '"':
        key = key[1:-1]
    if not _KEY.match(key):
        message = _("An idempotency key is 1 to 255 visible ASCII characters, e.g. a UUID.")
        raise ApiError(400, _("The request is not valid: see errors."), errors={HEADER: [message]})
    return key


def fingerprint(request: HttpRequest, payload: Schema) -> str:
    """What makes two requests the same one: method, path and the body as parsed (so the order of
    its fields and its spacing do not matter)."""
    body = json.dumps(payload.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(f"{request.method} {request.path}\n{body}".encode()).hexdigest()


def answer_once(*, user: AbstractBaseUser, key: str, fingerprint: str, create: Callable[[], Answer]) -> Answer:
    """The answer to the caller's request under ``key``: the first one's if it was made within the
    retention period, else ``create()``'s (called in a transaction with the key's row, so what it
    creates and the key are committed together or not at all). ``create``'s body must be JSON."""
    cutoff = _cutoff()
    if first := IdempotencyKey.objects.filter(user=user, key=key, created_at__gte=cutoff).first():
        return _replay(first, fingerprint)
    with transaction.atomic():
        # A key past its retention is free again.
        IdempotencyKey.objects.filter(user=user, key=key, created_at__lt=cutoff).delete()
        try:
            with transaction.atomic():
                row = IdempotencyKey.objects.create(user=user, key=key, fingerprint=fingerprint, status=0, response={})
        except IntegrityError:
            row = None  # a request with this key committed while this one waited on the insert
        if row is not None:
            answer = create()
            row.status, row.response = answer.status, answer.body
            row.save(update_fields=["status", "response"])
            return answer
    return _replay(IdempotencyKey.objects.get(user=user, key=key), fingerprint)


def _replay(row: IdempotencyKey, fingerprint: str) -> Answer:
    if row.fingerprint != fingerprint:
        raise ApiError(
            422,
            _("This Idempotency-Key was sent with a different request: send a new key with a new request."),
        )
    return Answer(row.status, row.response, replayed=True)


def purge_expired() -> int:
    """Delete the keys past their retention period (beat, hourly); how many."""
    deleted, _rows = IdempotencyKey.objects.filter(created_at__lt=_cutoff()).delete()
    return deleted


def _cutoff():
    return timezone.now() - timedelta(hours=settings.API_IDEMPOTENCY_KEY_HOURS)
