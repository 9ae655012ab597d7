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


def _login_form(base: str) -> tuple[httpx.Client, str]:
    """A client of its own (its session and CSRF cookie) with the login page's CSRF token."""
    client = httpx.Client(base_url=base, timeout=60)
    page = client.get(reverse("login")).text
    return client, re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)[1]


def _post(client: httpx.Client, token: str, username: str, password: str) -> httpx.Response:
    return client.post(
        reverse("login"), data={"csrfmiddlewaretoken": token, "username": username, "password": password}
    )


def _simultaneous(base: str, name: str, passwords: list[str]) -> list[httpx.Response]:
    """Each password POSTed from a session of its own, all released at the same moment."""
    forms = [_login_form(base) for _ in passwords]
    barrier, responses = threading.Barrier(len(passwords)), [None] * len(passwords)

    def attempt(i: int) -> None:
        barrier.wait()
        responses[i] = _post(*forms[i], name, passwords[i])

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(len(passwords))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for client, _token in forms:
        client.close()
    return responses


def _what_went_wrong(name: str, checks: list[tuple[str, bool]], right: httpx.Response) -> list[str]:
    # The checks of this account, in order; a right password starts the count again.
    results = "".join("R" if right else "W" for account, right in checks if account == name)
    wrong_in_a_row = [len(run) for run in results.split("R")]
    problems = []
    if max(wrong_in_a_row) > LIMIT:
        problems.append(f"{max(wrong_in_a_row)} wrong passwords checked in a row (limit {LIMIT})")
    if "R" in results and results.index("R") >= LIMIT:
        problems.append(f"the right password logged in after {results.index('R')} wrong ones")
    if ("R" in results) != (right.status_code == 302) or ("R" not in results and LOCKED not in right.text):
        problems.append(f"the right password's answer: {right.status_code}")
    # A refused attempt is not counted: the count is the wrong passwords checked since the right one.
    row = LoginFailures.objects.filter(scope="account", key=name).first()
    if (row.failures if row else 0) != wrong_in_a_row[-1]:
        problems.append(f"{row.failures if row else 0} failures counted for {wrong_in_a_row[-1]} checked")
    return [f"{name} ({results}): {problem}" for problem in problems]


@pytest.mark.django_db(transaction=True)
def test_simultaneous_logins_check_no_more_wrong_passwords_than_the_limit(live_server, settings, password_checks):
    settings.LOGIN_FAILURES_PER_ACCOUNT = LIMIT
    settings.LOGIN_FAILURES_PER_IP = 1000  # every request comes from 127.0.0.1: the account's limit is raced
    settings.LOGIN_LOCKOUT_SECONDS = 600
    problems = []
    for trial in range(ROUNDS):  # a race is a matter of chance: several rounds
        name = f"target{trial}"
        make_user(name)
        client, token = _login_form(live_server.url)
        for _ in range(LIMIT - 1):
            assert WRONG in _post(client, token, name, "wrong").text
        client.close()
        # Then 8 at once, 7 wrong and 1 right.
        responses = _simultaneous(live_server.url, name, ["wrong"] * 3 + [f"pw-{name}"] + ["wrong"] * 4)
        for response in responses:  # each answer says what happened to it
            assert response.status_code == 302 or WRONG in response.text or LOCKED in response.text
        problems += _what_went_wrong(name, password_checks, responses[3])
    assert not problems, "\n".join(problems)
