"""Password-reset mails are limited per email address and per client address (feedback/throttle.py),
with the same answer past the limit as before it, so the page still tells nobody which addresses
have an account."""

from datetime import timedelta

import pytest
from django.core import mail
from django.urls import reverse
from django.utils import timezone

from feedback.models import LoginFailures

from .conftest import make_user

pytestmark = pytest.mark.django_db
RESET = reverse("password_reset")
DONE = reverse("password_reset_done")


def _ask(client, email: str, address: str = "203.0.113.7"):
    return client.post(RESET, {"email": email}, REMOTE_ADDR=address)


def test_twenty_requests_send_the_limit_s_mails_and_another_address_still_gets_its_own(client, settings):
    assert settings.PASSWORD_RESET_MAILS_PER_EMAIL == 3 and settings.PASSWORD_RESET_MAILS_PER_IP == 10
    make_user("dana", email="dana@example.com")
    make_user("erin", email="erin@example.com")
    # Any case is the same address to Django's reset form, so to the count too.
    answers = [_ask(client, "dana@example.com" if n % 2 else "Dana@Example.COM") for n in range(20)]
    assert [message.to for message in mail.outbox] == [["dana@example.com"]] * 3
    # Past the limit the answer is the one before it, the page a script or a person reads alike.
    assert {(answer.status_code, answer["Location"]) for answer in answers} == {(302, DONE)}
    assert "Check your email" in client.get(DONE).content.decode()
    # Refused requests were not counted: the limit ends an hour after the third mail.
    assert LoginFailures.objects.get(scope="reset_mail", key="dana@example.com").failures == 3
    assert LoginFailures.objects.get(scope="reset_ip", key="203.0.113.7").failures == 3
    # Another account's address, from the same client, still gets its mail.
    _ask(client, "erin@example.com")
    assert [message.to for message in mail.outbox[3:]] == [["erin@example.com"]]
    # An hour after the last mail, the first address gets mail again.
    LoginFailures.objects.update(last_failure_at=timezone.now() - timedelta(seconds=3601))
    _ask(client, "dana@example.com")
    assert [message.to for message in mail.outbox[4:]] == [["dana@example.com"]]


def test_one_client_gets_its_limit_of_mails_whichever_addresses_it_asks_for(client, settings):
    settings.PASSWORD_RESET_MAILS_PER_IP = 6
    for n in range(8):
        make_user(f"user{n}", email=f"user{n}@example.com")
    # Addresses without an account are counted the same: the limit tells nothing about them.
    for n in range(3):
        assert _ask(client, f"nobody{n}@example.com")["Location"] == DONE
    for n in range(8):
        assert _ask(client, f"user{n}@example.com")["Location"] == DONE
    assert [message.to for message in mail.outbox] == [[f"user{n}@example.com"] for n in range(3)]
    # From another client the next address gets its mail, an IPv6 one counted by its /64.
    for n in range(7):
        _ask(client, "user7@example.com" if n else "user6@example.com", address=f"2001:db8:1:2::{n + 1}")
    assert [message.to for message in mail.outbox[3:]] == [["user6@example.com"]] + [["user7@example.com"]] * 3
    assert LoginFailures.objects.get(scope="reset_ip", key="2001:db8:1:2::/64").failures == 4
