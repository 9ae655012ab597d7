"""The login lockout holds under simultaneous logins: an attempt is counted before its password is
checked (feedback/throttle.py), so requests released together cannot all slip past the check."""

import re
import threading

import httpx
import pytest
from django.contrib.auth.base_user import AbstractBaseUser
from django.urls import reverse

from feedback.models import LoginFailures

from .conftest import make_user

LIMIT = 5
ROUNDS = 4
LOCKED = "Too many failed login attempts: logging in is blocked for"
WRONG = "Your username and password didn&#x27;t match."


@pytest.fixture
def password_checks(monkeypatch) -> list[tuple[str, bool]]:
    """Every password Django checks, in the order the checks end: (account, right or not)."""
    checks, lock, check = [], threading.Lock(), AbstractBaseUser.check_password

    def counted(user, raw_password):
        right = check(user, raw_password)
        with lock:
            checks.append((user.get_username(), right))
        return right

    monkeypatch.setattr(AbstractBaseUser, "check_password", counted)
    return checks


def _login_form(base: str, address: str) -> tuple[httpx.Client, str]:
    """A client of its own (its session and CSRF cookie, its address as the proxy header gives it)
    with the login page's CSRF token."""
    client = httpx.Client(base_url=base, timeout=60, headers={"X-Forwarded-For": address})
    page = client.get(reverse("login")).text
    return client, re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)[1]


def _post(client: httpx.Client, token: str, username: str, password: str) -> httpx.Response:
    return client.post(
        reverse("login"), data={"csrfmiddlewaretoken": token, "username": username, "password": password}
    )


def _simultaneous(base: str, address: str, logins: list[tuple[str, str]]) -> list[httpx.Response]:
    """Each (name, password) POSTed from a session of its own, all released at the same moment."""
    forms = [_login_form(base, address) for _ in logins]
    barrier, responses = threading.Barrier(len(logins)), [None] * len(logins)

    def attempt(i: int) -> None:
        barrier.wait()
        responses[i] = _post(*forms[i], *logins[i])

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(len(logins))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for client, _token in forms:
        client.close()
    return responses


def _what_went_wrong(results: str, right: httpx.Response, counted: int, *, scope: str) -> list[str]:
    """What a round's password checks (in order: W wrong, R right) show against the limit. A right
    password starts the account's count again, never the address's (it only gives its own back)."""
    wrong_in_a_row = [len(run) for run in results.split("R")] if scope == "account" else [results.count("W")]
    problems = []
    if max(wrong_in_a_row) > LIMIT:
        problems.append(f"{max(wrong_in_a_row)} wrong passwords checked (limit {LIMIT})")
    if "R" in results and results.index("R") >= LIMIT:
        problems.append(f"the right password logged in after {results.index('R')} wrong ones")
    if ("R" in results) != (right.status_code == 302) or ("R" not in results and LOCKED not in right.text):
        problems.append(f"the right password's answer: {right.status_code}")
    # A refused attempt is not counted: the count is the wrong passwords checked (since the right one).
    if counted != wrong_in_a_row[-1]:
        problems.append(f"{counted} failures counted for {wrong_in_a_row[-1]} checked")
    return problems


@pytest.mark.parametrize("scope", ["account", "address"])
@pytest.mark.django_db(transaction=True)
def test_simultaneous_logins_check_no_more_wrong_passwords_than_the_limit(
    live_server, settings, password_checks, scope
):
    # The limit raced is the scope's; the other one is out of the way.
    settings.LOGIN_FAILURES_PER_ACCOUNT = LIMIT if scope == "account" else 1000
    settings.LOGIN_FAILURES_PER_IP = LIMIT if scope == "address" else 1000
    settings.LOGIN_LOCKOUT_SECONDS = 600
    settings.LOGIN_CLIENT_IP_HEADER = "X-Forwarded-For"  # each round from an address of its own
    problems = []
    for trial in range(ROUNDS):  # a race is a matter of chance: several rounds
        address = f"198.51.100.{trial + 1}"
        # One account, or a new account for each attempt (the address's count spans accounts).
        names = [f"target{trial}"] * 12 if scope == "account" else [f"target{trial}-{n}" for n in range(12)]
        for name in set(names):
            make_user(name)
        client, token = _login_form(live_server.url, address)
        for name in names[: LIMIT - 1]:
            assert WRONG in _post(client, token, name, "wrong").text
        client.close()
        # Then 8 at once, 7 wrong and 1 right.
        logins = [(name, "wrong") for name in names[LIMIT - 1 :]]
        logins[3] = (logins[3][0], f"pw-{logins[3][0]}")
        responses = _simultaneous(live_server.url, address, logins)
        for response in responses:  # each answer says what happened to it
            assert response.status_code == 302 or WRONG in response.text or LOCKED in response.text
        results = "".join("R" if right else "W" for account, right in password_checks if account in names)
        row = LoginFailures.objects.filter(scope=scope, key=names[-1] if scope == "account" else address).first()
        found = _what_went_wrong(results, responses[3], row.failures if row else 0, scope=scope)
        problems += [f"{scope} round {trial} ({results}): {problem}" for problem in found]
    assert not problems, "\n".join(problems)
