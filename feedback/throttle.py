"""Login throttling: failed logins are counted per account name and per client address; past a
limit, every login of that account, or from that address, is refused for a cool-off period, the
right password included. The same counts limit password-reset mails, per email address and per
client address.

- ``LockoutBackend`` comes first in AUTHENTICATION_BACKENDS, so it covers every login form (the
  site's and the admin's) alike. Before any password is checked it *reserves* the attempt: one
  conditional UPDATE per count (``failures = failures + 1 WHERE failures < limit``) for the account
  name and for the address. A login that cannot reserve both is refused, and leaves on the request
  until when (``LOCKED_UNTIL``) for the form's message. Counting first is what makes the limit
  hold under simultaneous requests: checking the count and adding to it after the password was
  checked let every request that arrived together past the check (4 failures, then 8 at once:
  10 to 12 wrong passwords tried against a limit of 5, and the right one let in while locked).
  django-axes has that race and keeps it (jazzband/django-axes#592, "known issue, won't fix"),
  one more reason this throttle is our own.
- The account name is counted as typed: a name that does not exist is counted the same way, so a
  lockout tells nobody which accounts exist. An IPv6 client is counted by its /64.
- ``user_login_failed``: the reservation was the failure; its time is recorded as the last
  failure's. A login refused by the lockout reserved nothing, so is not counted again and the
  cool-off ends when it said.
- ``user_logged_in`` forgets the account's failures, and gives back what the login reserved for
  the address but never its earlier failures: otherwise someone with one valid account could
  wipe the address's count between guesses at others. A login whose password was right but that
  the form still refused (the admin's login for an account without staff status) keeps its
  reservation: it counts as a failed login.
- While an attempt is being checked it is counted: a concurrent login that would pass the limit
  is refused even if that attempt then turns out to have the right password.

Rows go away once a period has passed since their last failure (the count then starts again at
one); deleting one (the admin's *Unlock*, ``unlock_login``) unlocks. The counts live in the
database, not in the cache: the embedded default's file cache culls entries at random once it
holds 300, which would forget a lockout.
"""

import ipaddress
import logging
import unicodedata
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction
from django.db.models import Case, F, Q, QuerySet, Value, When
from django.dispatch import receiver
from django.http import HttpRequest
from django.utils import timezone

from feedback.models import LoginFailures

logger = logging.getLogger(__name__)

# The request attribute that holds until when its login is refused (set when it is).
LOCKED_UNTIL = "login_locked_until"
# The request attribute that holds what its login attempt reserved: [(scope, key)].
RESERVED = "login_reserved"
KEY_LENGTH = LoginFailures._meta.get_field("key").max_length
Scope = LoginFailures.Scope
Target = tuple[str, str]


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


def _period(scope: str) -> timedelta:
    if scope in (Scope.RESET_EMAIL, Scope.RESET_ADDRESS):
        return timedelta(seconds=settings.PASSWORD_RESET_MAIL_SECONDS)
    return timedelta(seconds=settings.LOGIN_LOCKOUT_SECONDS)


def _limit(scope: str) -> int:
    return {
        Scope.ACCOUNT: settings.LOGIN_FAILURES_PER_ACCOUNT,
        Scope.ADDRESS: settings.LOGIN_FAILURES_PER_IP,
        Scope.RESET_EMAIL: settings.PASSWORD_RESET_MAILS_PER_EMAIL,
        Scope.RESET_ADDRESS: settings.PASSWORD_RESET_MAILS_PER_IP,
    }[scope]


def _targets(username: str | None, address: str | None) -> Iterator[Target]:
    if username:
        yield Scope.ACCOUNT, username[:KEY_LENGTH]
    if address:
        yield Scope.ADDRESS, address


def _rows(targets: Iterable[Target]) -> QuerySet[LoginFailures]:
    query = Q(pk__in=[])
    for scope, key in targets:
        query |= Q(scope=scope, key=key)
    return LoginFailures.objects.filter(query)


def _reserve(scope: str, key: str, now: datetime) -> bool:
    """Count one attempt for this key unless it has reached its limit; False: it has (nothing
    counted). One statement decides, so simultaneous requests cannot all take the last place."""
    # A period after the last failure the count starts again: such a row is reserved from one.
    stale = Q(last_failure_at__lte=now - _period(scope))
    rows = LoginFailures.objects.filter(scope=scope, key=key)
    if (limit := _limit(scope)) > 0:
        rows = rows.filter(Q(failures__lt=limit) | stale)
    count = {
        "failures": Case(When(stale, then=Value(1)), default=F("failures") + 1),
        # The attempt's own time is recorded once it has failed (login_failure_record).
        "last_failure_at": Case(When(stale, then=Value(now)), default=F("last_failure_at")),
    }
    if rows.update(**count):
        return True
    try:
        with transaction.atomic():
            LoginFailures.objects.create(scope=scope, key=key, failures=1, last_failure_at=now)
        return True
    except IntegrityError:  # a row exists: at its limit, or another request's first just written
        return bool(rows.update(**count))


def _give_back(scope: str, key: str) -> None:
    """Return one reservation; a row left at nought goes (conditionally: another may have just
    reserved from it)."""
    rows = LoginFailures.objects.filter(scope=scope, key=key)
    rows.filter(failures__gt=0).update(failures=F("failures") - 1)
    rows.filter(failures=0).delete()


def _reserve_all(targets: list[Target]) -> bool:
    """Reserve one attempt on every target, or on none."""
    now = timezone.now()
    # Rows a whole period old no longer count: they go (and would be reserved from one anyway).
    stale = Q(pk__in=[])
    for scope in Scope:
        stale |= Q(scope=scope, last_failure_at__lte=now - _period(scope))
    LoginFailures.objects.filter(stale).delete()
    reserved = []
    for scope, key in targets:
        if not _reserve(scope, key, now):
            for target in reserved:
                _give_back(*target)
            return False
        reserved.append((scope, key))
    return True


def login_locked_until(*, username: str | None, address: str | None) -> datetime | None:
    """Until when logins of this account name, or from this address, are refused; None: not locked."""
    return max(filter(None, map(locked_until, _rows(_targets(username, address)))), default=None)


def locked_until(row: LoginFailures) -> datetime | None:
    """Until when this row locks its account name or address (or refuses its reset mails); None:
    it does not (any more)."""
    end = row.last_failure_at + _period(row.scope)
    return end if 0 < _limit(row.scope) <= row.failures and end > timezone.now() else None


def login_attempt_reserve(*, username: str | None, address: str | None) -> tuple[list[Target], datetime | None]:
    """Count a login attempt, as a failure, before its password is checked: for the account name
    and for the address. Returns what was reserved, and None; or nothing and until when logins
    are refused (nothing counted)."""
    targets = list(_targets(username, address))
    for _ in range(3):
        if _reserve_all(targets):
            return targets, None
        if until := login_locked_until(username=username, address=address):
            return [], until
        # Unlocked in between (a right password forgot the account's count, or an Unlock): again.
    return [], timezone.now()


def login_failure_record(*, targets: Iterable[Target]) -> None:
    """A reserved attempt failed: its time is the last failure's. A row that went meanwhile (an
    Unlock, or a whole period passed) counts it again from one."""
    now = timezone.now()
    for scope, key in targets:
        if not LoginFailures.objects.filter(scope=scope, key=key).update(last_failure_at=now):
            _reserve(scope, key, now)


def login_failures_clear(*, username: str | None = None, address: str | None = None) -> int:
    """Unlock: forget the failures of this account name and/or this address (normalised as
    counted). Returns how many rows went."""
    normalised = address_key(address) if address else None
    return _rows(_targets(username, normalised or address)).delete()[0]


def reset_mail_key(email: str) -> str:
    """An email address as counted: as Django's reset form matches it to accounts (NFKC, any case)."""
    return unicodedata.normalize("NFKC", email.strip()).casefold()[:KEY_LENGTH]


def reset_mail_reserve(*, email: str, address: str) -> bool:
    """Count one password-reset mail for this email address and for this client address (whether
    an account has the address or not, so the limit tells nothing either); False: either has had
    its limit, send nothing (nothing counted)."""
    allowed = _reserve_all([(Scope.RESET_EMAIL, reset_mail_key(email)), (Scope.RESET_ADDRESS, address)])
    if not allowed:
        logger.warning("password-reset mail not sent, limit reached: email %r, address %s", email, address)
    return allowed


class LockoutBackend:
    """Reserves the attempt before any backend checks its password, and refuses a locked login.
    It authenticates nobody and has no ``get_user``, so no session is ever tied to it."""

    def authenticate(self, request: HttpRequest | None, username: str | None = None, **credentials) -> None:
        address = client_address(request) if request is not None else None
        reserved, until = login_attempt_reserve(username=username, address=address)
        if request is not None:
            setattr(request, RESERVED, reserved)
        if until is None:
            return None  # the next backend checks the password
        if request is not None:
            setattr(request, LOCKED_UNTIL, until)
        # Django stops at PermissionDenied: no other backend is asked.
        raise PermissionDenied


# Connected by FeedbackConfig.ready.
@receiver(user_login_failed)
def _login_failed(sender, credentials: dict, request: HttpRequest | None = None, **kwargs) -> None:
    # Without a request (authenticate() called directly) the reservation has counted it all the same.
    reserved = getattr(request, RESERVED, None)
    if not reserved:
        return  # refused by the lockout, not a guess at the password
    setattr(request, RESERVED, [])
    login_failure_record(targets=reserved)
    username = credentials.get("username")
    address = client_address(request)
    until = login_locked_until(username=username, address=address)
    if until is not None:
        logger.warning("login locked until %s: account %r, address %s", until.isoformat(), username, address)
        setattr(request, LOCKED_UNTIL, until)


@receiver(user_logged_in)
def _logged_in(sender, request: HttpRequest | None, user, **kwargs) -> None:
    reserved = getattr(request, RESERVED, None) or []
    if reserved:
        setattr(request, RESERVED, [])
    names = {user.get_username()} | {key for scope, key in reserved if scope == Scope.ACCOUNT}
    for name in names:
        login_failures_clear(username=name)
    for scope, key in reserved:
        if scope == Scope.ADDRESS:
            _give_back(scope, key)
