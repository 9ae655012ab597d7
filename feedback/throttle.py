"""Login throttling: failed logins are counted per account name and per client address; past a
limit, every login of that account, or from that address, is refused for a cool-off period, the
right password included.

- ``LockoutBackend`` comes first in AUTHENTICATION_BACKENDS: it refuses a locked login before any
  password is checked, so it covers every login form (the site's and the admin's) alike, and
  leaves on the request until when (``LOCKED_UNTIL``) for the form's message.
- ``user_login_failed`` counts a failure for the account name (as typed: a name that does not
  exist is counted the same way, so a lockout tells nobody which accounts exist) and for the
  address; a login refused by the lockout is not counted again, so the cool-off ends when it said.
- ``user_logged_in`` forgets the account's failures, never the address's: otherwise someone with
  one valid account could wipe the address's count between guesses at others.

The counts live in the database, not in the cache: the embedded default's file cache culls entries
at random once it holds 300, which would forget a lockout. Rows go away on their own once the
cool-off has passed since their last failure; deleting one (the admin, ``unlock_login``) unlocks.
"""

import ipaddress
import logging
from collections.abc import Iterator
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.dispatch import receiver
from django.http import HttpRequest
from django.utils import timezone

from feedback.models import LoginFailures

logger = logging.getLogger(__name__)

# The request attribute that holds until when its login is refused (set when it is).
LOCKED_UNTIL = "login_locked_until"
KEY_LENGTH = LoginFailures._meta.get_field("key").max_length
Scope = LoginFailures.Scope


def address_key(raw: str) -> str | None:
    """An address as counted: an IPv6 client by its /64 (one host usually has the whole network,
    so counting single addresses would give it billions of tries); None if ``raw`` is no address."""
    try:
        address = ipaddress.ip_address(raw.strip())
    except ValueError:
        return None
    if address.version == 6 and address.ipv4_mapped is None:
        return str(ipaddress.ip_network(f"{address}/64", strict=False))
    return str(getattr(address, "ipv4_mapped", None) or address)


def client_address(request: HttpRequest) -> str:
    """The client's address: REMOTE_ADDR, or the LOGIN_CLIENT_IP_HEADER header when one is
    configured (behind a proxy that sets it; a client could send any value otherwise)."""
    header = settings.LOGIN_CLIENT_IP_HEADER
    # A proxy appends the address it saw to X-Forwarded-For: the right-most one is the one it vouches for.
    forwarded = request.headers.get(header, "").rsplit(",", 1)[-1] if header else ""
    return address_key(forwarded) or address_key(request.META.get("REMOTE_ADDR", "")) or "unknown"


def _period() -> timedelta:
    return timedelta(seconds=settings.LOGIN_LOCKOUT_SECONDS)


def _targets(username: str | None, address: str | None) -> Iterator[tuple[str, str]]:
    if username:
        yield Scope.ACCOUNT, username[:KEY_LENGTH]
    if address:
        yield Scope.ADDRESS, address


def _limit(scope: str) -> int:
    return settings.LOGIN_FAILURES_PER_ACCOUNT if scope == Scope.ACCOUNT else settings.LOGIN_FAILURES_PER_IP


def login_locked_until(*, username: str | None, address: str | None) -> datetime | None:
    """Until when logins of this account name, or from this address, are refused; None: not locked."""
    targets = list(_targets(username, address))
    if not targets:
        return None
    query = Q()
    for scope, key in targets:
        query |= Q(scope=scope, key=key)
    rows = LoginFailures.objects.filter(query, last_failure_at__gt=timezone.now() - _period())
    return max(filter(None, map(locked_until, rows)), default=None)


def locked_until(row: LoginFailures) -> datetime | None:
    """Until when this row locks its account name or address; None: it does not (any more)."""
    end = row.last_failure_at + _period()
    return end if 0 < _limit(row.scope) <= row.failures and end > timezone.now() else None


def login_failure_record(*, username: str | None, address: str | None) -> None:
    """Count one failed login for the account name and for the address."""
    now = timezone.now()
    # Failures a whole cool-off period old no longer count: their rows start again from one.
    LoginFailures.objects.filter(last_failure_at__lte=now - _period()).delete()
    for scope, key in _targets(username, address):
        rows = LoginFailures.objects.filter(scope=scope, key=key)
        if rows.update(failures=F("failures") + 1, last_failure_at=now):
            continue
        try:
            with transaction.atomic():
                LoginFailures.objects.create(scope=scope, key=key, failures=1, last_failure_at=now)
        except IntegrityError:  # another request's first failure was written in between
            rows.update(failures=F("failures") + 1, last_failure_at=now)


def login_failures_clear(*, username: str | None = None, address: str | None = None) -> int:
    """Unlock: forget the failures of this account name and/or this address (normalised as
    counted). Returns how many rows went."""
    query = Q(pk__in=[])
    normalised = address_key(address) if address else None
    for scope, key in _targets(username, normalised or address):
        query |= Q(scope=scope, key=key)
    return LoginFailures.objects.filter(query).delete()[0]


class LockoutBackend:
    """Refuses a locked login before any backend checks its password. It authenticates nobody
    and has no ``get_user``, so no session is ever tied to it."""

    def authenticate(self, request: HttpRequest | None, username: str | None = None, **credentials) -> None:
        address = client_address(request) if request is not None else None
        until = login_locked_until(username=username, address=address)
        if until is None:
            return None  # the next backend checks the password
        if request is not None:
            setattr(request, LOCKED_UNTIL, until)
        # Django stops at PermissionDenied: no other backend is asked.
        raise PermissionDenied


# Connected by FeedbackConfig.ready.
@receiver(user_login_failed)
def _login_failed(sender, credentials: dict, request: HttpRequest | None = None, **kwargs) -> None:
    if request is not None and getattr(request, LOCKED_UNTIL, None):
        return  # refused by the lockout, not a guess at the password
    username = credentials.get("username")
    address = client_address(request) if request is not None else None
    login_failure_record(username=username, address=address)
    until = login_locked_until(username=username, address=address)
    if until is not None:
        logger.warning("login locked until %s: account %r, address %s", until.isoformat(), username, address)
        if request is not None:
            setattr(request, LOCKED_UNTIL, until)


@receiver(user_logged_in)
def _logged_in(sender, request: HttpRequest | None, user, **kwargs) -> None:
    login_failures_clear(username=user.get_username())
