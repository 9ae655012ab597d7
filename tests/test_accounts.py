"""Accounts: login throttling per account and per address, the password change and reset pages,
and where their mail goes."""

import io
import re
import subprocess
import sys
from datetime import timedelta

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core import mail
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from feedback import roles
from feedback.models import LoginFailures

from .conftest import make_user

pytestmark = pytest.mark.django_db
LOGIN = reverse("login")
LOCKED = "Too many failed login attempts: logging in is blocked for"
WRONG = "Your username and password didn&#x27;t match."


@pytest.fixture(autouse=True)
def _limits(settings):
    settings.LOGIN_FAILURES_PER_ACCOUNT = 3
    settings.LOGIN_FAILURES_PER_IP = 5
    settings.LOGIN_LOCKOUT_SECONDS = 600


def _log_in(client, username: str, password: str, address: str = "203.0.113.7", **headers):
    return client.post(LOGIN, {"username": username, "password": password}, REMOTE_ADDR=address, **headers)


def _signed_in(client) -> bool:
    return "_auth_user_id" in client.session


def test_an_account_is_locked_after_n_failures_and_refuses_even_the_right_password(client, operator):
    for _ in range(2):
        response = _log_in(client, "operator", "wrong")
        assert response.status_code == 200 and WRONG in response.content.decode()
    # The third failure locks: the page says so at once, in the site's layout, with its form.
    response = _log_in(client, "operator", "wrong")
    html = response.content.decode()
    assert response.status_code == 429 and LOCKED in html and "10 minutes" in html
    assert 'class="topbar"' in html and 'name="password"' in html and int(response["Retry-After"]) > 590
    # The right password is refused too, and a refused try does not extend the lock.
    response = _log_in(client, "operator", "pw-operator")
    assert response.status_code == 429 and LOCKED in response.content.decode() and not _signed_in(client)
    assert LoginFailures.objects.get(scope="account", key="operator").failures == 3
    # From another address too (the account is locked, not only this address)...
    assert _log_in(client, "operator", "pw-operator", address="198.51.100.1").status_code == 429
    # ...while other accounts still log in from here (this address has 3 failures of 5).
    make_user("other")
    assert _log_in(client, "other", "pw-other").status_code == 302 and _signed_in(client)
    # Once the cool-off has passed, the right password works again.
    LoginFailures.objects.update(last_failure_at=timezone.now() - timedelta(seconds=601))
    client.logout()
    assert _log_in(client, "operator", "pw-operator").status_code == 302 and _signed_in(client)


def test_a_successful_login_resets_the_account_s_count_but_not_the_address_s(client, operator):
    for _ in range(2):
        _log_in(client, "operator", "wrong")
    assert _log_in(client, "operator", "pw-operator").status_code == 302
    client.logout()
    assert not LoginFailures.objects.filter(scope="account", key="operator").exists()
    # Two more failures would have locked it had the count not started again.
    for _ in range(2):
        _log_in(client, "operator", "wrong")
    assert _log_in(client, "operator", "pw-operator").status_code == 302
    # Someone's own good login does not wipe what the address has tried against others.
    assert LoginFailures.objects.get(scope="address", key="203.0.113.7").failures == 4


def test_an_address_is_locked_after_m_failures_across_accounts(client, operator):
    # Guesses spread over many names, none of them reaching the account limit.
    for name in ("alice", "bob", "carol", "dave"):
        assert _log_in(client, name, "guess").status_code == 200
    response = _log_in(client, "erin", "guess")
    assert response.status_code == 429 and LOCKED in response.content.decode()
    # Every account is refused from this address, the right password included...
    response = _log_in(client, "operator", "pw-operator")
    assert response.status_code == 429 and LOCKED in response.content.decode() and not _signed_in(client)
    # ...and the same account logs in from another address.
    assert _log_in(client, "operator", "pw-operator", address="198.51.100.1").status_code == 302


def test_the_client_address_comes_from_the_configured_header_only(client, operator, settings):
    # By default X-Forwarded-For is the client's word and is ignored: the lock is on REMOTE_ADDR.
    for n in range(5):
        _log_in(client, f"name{n}", "guess", HTTP_X_FORWARDED_FOR=f"192.0.2.{n}")
    assert LoginFailures.objects.get(scope="address").key == "203.0.113.7"
    LoginFailures.objects.all().delete()
    # Behind a proxy that appends the address it saw, the right-most one counts.
    settings.LOGIN_CLIENT_IP_HEADER = "X-Forwarded-For"
    for n in range(5):
        _log_in(client, f"name{n}", "guess", address="10.0.0.1", HTTP_X_FORWARDED_FOR=f"192.0.2.{n}, 198.51.100.9")
    for seen, status in (("198.51.100.9", 429), ("198.51.100.10", 302)):
        response = _log_in(client, "operator", "pw-operator", address="10.0.0.1", HTTP_X_FORWARDED_FOR=seen)
        assert response.status_code == status, seen
    # An IPv6 client is counted by its /64.
    settings.LOGIN_CLIENT_IP_HEADER = ""
    _log_in(client, "nobody-here", "guess", address="2001:db8:1:2::5")
    assert LoginFailures.objects.filter(scope="address", key="2001:db8:1:2::/64").exists()


def test_the_admin_s_login_is_throttled_too(client):
    make_user("root", is_staff=True, is_superuser=True)
    url = reverse("admin:login")
    for _ in range(3):
        client.post(url, {"username": "root", "password": "wrong"}, REMOTE_ADDR="203.0.113.7")
    client.post(url, {"username": "root", "password": "pw-root"}, REMOTE_ADDR="203.0.113.7")
    assert not _signed_in(client)


def test_a_lockout_is_lifted_by_the_command_or_the_admin(client, operator):
    for _ in range(3):
        _log_in(client, "operator", "wrong")
    call_command("unlock_login", "--list", stdout=(listing := io.StringIO()))
    assert "account operator: 3 failures, locked until" in listing.getvalue()
    call_command("unlock_login", "--user", "operator", stdout=io.StringIO())
    assert _log_in(client, "operator", "pw-operator").status_code == 302
    client.logout()
    # The address's lockout, in the admin.
    for n in range(5):
        _log_in(client, f"name{n}", "guess")
    assert _log_in(client, "operator", "pw-operator").status_code == 429
    admin = Client()
    admin.force_login(make_user("root", is_staff=True, is_superuser=True))
    changelist = reverse("admin:feedback_loginfailures_changelist")
    assert "203.0.113.7" in admin.get(changelist).content.decode()
    row = LoginFailures.objects.get(scope="address")
    response = admin.post(changelist, {"action": "unlock", "_selected_action": [row.pk]}, follow=True)
    assert "1 lockout lifted." in response.content.decode()
    assert _log_in(client, "operator", "pw-operator").status_code == 302


# --- password change and reset ------------------------------------------------------------------
NEW_PASSWORD = "a brand new passphrase 42"


def test_the_password_can_be_changed_and_the_old_one_stops_working(client, operator):
    client.force_login(operator)
    page = client.get(reverse("feedback-run-list")).content.decode()
    assert f'href="{reverse("password_change")}"' in page and "Change password" in page  # in the navigation
    form = client.get(reverse("password_change")).content.decode()
    assert 'class="topbar"' in form and 'name="old_password"' in form and 'name="new_password2"' in form
    # A wrong old password, or a weak new one, is refused with the reason, and nothing changes.
    response = client.post(reverse("password_change"), {"old_password": "nope", "new_password1": NEW_PASSWORD,
                                                         "new_password2": NEW_PASSWORD})  # fmt: skip
    assert "Your old password was entered incorrectly" in response.content.decode()
    response = client.post(reverse("password_change"), {"old_password": "pw-operator", "new_password1": "short",
                                                         "new_password2": "short"})  # fmt: skip
    assert "This password is too short" in response.content.decode()
    response = client.post(
        reverse("password_change"),
        {"old_password": "pw-operator", "new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD},
        follow=True,
    )
    assert "Your password has been changed" in response.content.decode()
    assert client.get(reverse("feedback-run-list")).status_code == 200  # still signed in here
    client.logout()
    assert _log_in(client, "operator", "pw-operator").status_code == 200 and not _signed_in(client)
    assert _log_in(client, "operator", NEW_PASSWORD).status_code == 302 and _signed_in(client)


def test_a_reset_mail_s_link_sets_a_new_password_and_lifts_the_lockout(client):
    make_user("dana", roles.STAFF, email="dana@example.com")
    for _ in range(3):
        _log_in(client, "dana", "forgotten")
    assert _log_in(client, "dana", "pw-dana").status_code == 429
    login_page = client.get(LOGIN).content.decode()
    assert f'href="{reverse("password_reset")}"' in login_page and "Forgot your password?" in login_page
    # Signed out, as one is when one has forgotten it.
    response = client.post(reverse("password_reset"), {"email": "dana@example.com"}, follow=True)
    assert "Check your email" in response.content.decode()
    (message,) = mail.outbox
    assert message.to == ["dana@example.com"] and 'account "dana"' in message.body
    link = re.search(r"http://testserver(/accounts/reset/\S+/)", message.body)[1]
    form = client.get(link, follow=True)  # Django swaps the token for a session and redirects
    assert 'name="new_password1"' in form.content.decode()
    response = client.post(
        form.redirect_chain[-1][0], {"new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD}, follow=True
    )
    assert "Your new password is set" in response.content.decode()
    assert get_user_model().objects.get(username="dana").check_password(NEW_PASSWORD)
    # The link works once.
    assert "This link is not valid" in client.get(link, follow=True).content.decode()
    # Whoever reads the mail may log in at once: the account's lockout is gone.
    assert _log_in(client, "dana", NEW_PASSWORD).status_code == 302 and _signed_in(client)


def test_an_unknown_address_gets_the_same_answer_and_no_mail(client):
    response = client.post(reverse("password_reset"), {"email": "nobody@example.com"}, follow=True)
    assert "Check your email" in response.content.decode() and mail.outbox == []


def test_the_embedded_default_writes_mail_into_var_mail_and_email_url_changes_it(tmp_path):
    def send(**env) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "manage.py", "sendtestemail", "someone@example.com"],
            cwd=settings.BASE_DIR,
            env={"PATH": "/usr/bin:/bin", "VAR_DIR": str(tmp_path), "STATIC_MANIFEST": "false", **env},
            capture_output=True,
            text=True,
            check=True,
        )

    send()
    (written,) = (tmp_path / "mail").iterdir()
    assert "To: someone@example.com" in written.read_text()
    assert "To: someone@example.com" in send(EMAIL_URL="consolemail://").stdout


def test_beat_removes_expired_sessions_and_keeps_live_ones():
    from django.contrib.sessions.models import Session

    from feedback import tasks

    user = make_user("sessions-user", roles.OPERATOR)
    gone, kept = Client(), Client()
    gone.force_login(user)
    kept.force_login(user)
    Session.objects.filter(session_key=gone.session.session_key).update(expire_date=timezone.now() - timedelta(1))

    tasks.sessions_purge_task()

    assert list(Session.objects.values_list("session_key", flat=True)) == [kept.session.session_key]
    assert kept.get(reverse("feedback-run-list")).status_code == 200  # still signed in
    assert gone.get(reverse("feedback-run-list")).status_code == 302  # to the login page
    schedule = {entry["task"]: entry["schedule"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert schedule["feedback.tasks.sessions_purge_task"] == 3600.0
