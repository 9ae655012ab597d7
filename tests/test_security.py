"""Deployment settings, CSRF on every state change (htmx included) and object-level access."""

import re
import subprocess
import sys

import pytest
from django.conf import settings
from django.test import Client
from django.urls import reverse

from feedback import roles
from feedback.models import Run, Step

from .conftest import make_user
from .factories import make_run
from .test_permissions import ACCESS, _kwargs

PRODUCTION_ENV = {
    "DEBUG": "false",
    "SECRET_KEY": "x9!Kq2#vLz7@Wm4$Rt8^Yp3&Bn6*Hc1(Jd5)Fg0_Ss-Uu=Ee+Aa" + "Qw" * 10,
    "ALLOWED_HOSTS": "agents.example.com",
    "CSRF_TRUSTED_ORIGINS": "https://agents.example.com",
    "SECURE_SSL_REDIRECT": "true",
    "SESSION_COOKIE_SECURE": "true",
    "CSRF_COOKIE_SECURE": "true",
    "SECURE_HSTS_SECONDS": "31536000",
    "SECURE_HSTS_INCLUDE_SUBDOMAINS": "true",
    "SECURE_HSTS_PRELOAD": "true",
}


def _check_deploy(tmp_path, **env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=settings.BASE_DIR,
        env={"PATH": "/usr/bin:/bin", "VAR_DIR": str(tmp_path), "STATIC_MANIFEST": "false", **env},
        capture_output=True,
        text=True,
    )


def test_check_deploy_is_clean_with_a_production_environment(tmp_path):
    result = _check_deploy(tmp_path, **PRODUCTION_ENV)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_check_deploy_fails_when_a_production_setting_is_missing(tmp_path):
    # The check has teeth: DEBUG on, or cookies sent over plain HTTP, is reported.
    for override in ({"DEBUG": "true"}, {"SESSION_COOKIE_SECURE": "false"}):
        result = _check_deploy(tmp_path, **{**PRODUCTION_ENV, **override})
        assert result.returncode != 0, override


def test_session_and_password_settings():
    assert settings.SESSION_COOKIE_HTTPONLY and settings.CSRF_COOKIE_HTTPONLY
    assert settings.SESSION_COOKIE_AGE <= 24 * 3600
    assert settings.X_FRAME_OPTIONS == "DENY"
    from django.contrib.auth.password_validation import validate_password
    from django.core.exceptions import ValidationError

    for weak in ("password123", "12345678901234", "short"):
        with pytest.raises(ValidationError):
            validate_password(weak)
    validate_password("correct horse battery staple 9")


# --- CSRF ------------------------------------------------------------------------------------
POST_VIEWS = [(name, kwarg) for name, method, kwarg, _ in ACCESS if method == "post"]


@pytest.fixture
def everyone(db):
    """One person with every role, owner of the run: only CSRF can stop their requests."""
    return make_user("everyone", roles.STAFF, roles.OPERATOR, roles.REVIEWER)


def _refused_by_csrf(response) -> bool:
    # The demo loop answers 403 to everyone on PostgreSQL: only CSRF's own page counts here.
    return response.status_code == 403 and b"CSRF verification failed" in response.content


def _token_from_page(client: Client) -> str:
    html = client.get(reverse("feedback-run-list")).content.decode()
    return re.search(r"hx-headers='\{\"x-csrftoken\": \"([^\"]+)\"\}'", html).group(1)


@pytest.mark.parametrize(("name", "kwarg"), POST_VIEWS)
def test_a_post_without_a_csrf_token_is_refused(everyone, name, kwarg):
    client = Client(enforce_csrf_checks=True)
    client.force_login(everyone)
    url = reverse(name, kwargs=_kwargs(kwarg, make_run(user=everyone)))
    for response in (
        client.post(url),
        client.post(url, HTTP_HX_REQUEST="true"),
        client.post(url, HTTP_X_CSRFTOKEN="forged-token-0123456789abcdef0123"),
    ):
        assert _refused_by_csrf(response)


@pytest.mark.parametrize(("name", "kwarg"), POST_VIEWS)
def test_a_post_with_the_page_s_token_passes_csrf(everyone, name, kwarg):
    client = Client(enforce_csrf_checks=True)
    client.force_login(everyone)
    token = _token_from_page(client)
    url = reverse(name, kwargs=_kwargs(kwarg, make_run(user=everyone)))
    # As htmx sends it (the hx-headers of <body>) ...
    assert not _refused_by_csrf(client.post(url, HTTP_HX_REQUEST="true", HTTP_X_CSRFTOKEN=token))
    # ... and as a plain form sends it.
    url = reverse(name, kwargs=_kwargs(kwarg, make_run(user=everyone)))
    assert not _refused_by_csrf(client.post(url, {"csrfmiddlewaretoken": token}))


def test_the_login_form_needs_its_token_too(db):
    make_user("someone")
    client = Client(enforce_csrf_checks=True)
    assert _refused_by_csrf(client.post(reverse("login"), {"username": "someone", "password": "pw-someone"}))


# --- object-level access ---------------------------------------------------------------------
# The run page's parts, each at its own URL.
PARTS = ("feedback-run-summary", "feedback-run-steps", "feedback-run-evaluations", "feedback-run-child")


@pytest.fixture
def two_runs(db):
    mine_owner, other_owner = make_user("alice", roles.STAFF), make_user("bob", roles.STAFF)
    mine, others = make_run(user=mine_owner), make_run(user=other_owner)
    for run in (mine, others):
        Step.objects.create(run=run, index=0, turn=1, kind=Step.Kind.THOUGHT, thought=f"secret of run {run.pk}")
    return mine_owner, mine, others


def test_staff_reach_their_own_run_in_every_form(client, two_runs):
    owner, mine, _ = two_runs
    client.force_login(owner)
    assert client.get(reverse("feedback-run-detail", args=[mine.pk])).status_code == 200
    assert client.get(reverse("feedback-run-trace-json", args=[mine.pk])).status_code == 200
    assert client.get(reverse("feedback-run-trace-json", args=[mine.pk]), {"step": 0}).status_code == 200
    answers = {part: client.get(reverse(part, args=[mine.pk]), HTTP_HX_REQUEST="true") for part in PARTS}
    assert all(answer.status_code == 200 for answer in answers.values())
    for part in ("feedback-run-steps", "feedback-run-child"):  # the parts that show its trace
        assert f"secret of run {mine.pk}" in answers[part].content.decode()
    poll = client.get(reverse("feedback-run-list"), HTTP_HX_REQUEST="true")
    assert f'id="run-{mine.pk}"' in poll.content.decode()  # its row, as it now is
    assert client.post(reverse("feedback-run-rerun", args=[mine.pk])).status_code == 302
    assert client.post(reverse("feedback-run-cancel", args=[mine.pk])).status_code == 302


def test_staff_reach_no_other_person_s_run_in_any_form(client, two_runs):
    owner, _, others = two_runs
    client.force_login(owner)
    detail = reverse("feedback-run-detail", args=[others.pk])
    trace = reverse("feedback-run-trace-json", args=[others.pk])
    for response in (
        client.get(detail),
        *(client.get(reverse(part, args=[others.pk]), HTTP_HX_REQUEST="true") for part in PARTS),
        client.get(reverse("feedback-run-steps", args=[others.pk]), {"after": "-1"}, HTTP_HX_REQUEST="true"),
        client.get(trace),
        client.get(trace, {"step": 0}),
        client.post(reverse("feedback-run-cancel", args=[others.pk])),
        client.post(reverse("feedback-run-rerun", args=[others.pk])),
    ):
        assert response.status_code == 403
        assert f"secret of run {others.pk}" not in response.content.decode()
    listing = client.get(reverse("feedback-run-list"), {"q": "secret"}).content.decode()
    assert f'id="run-{others.pk}"' not in listing
    # Nor in the list's poll (the table asking its own URL).
    poll = client.get(reverse("feedback-run-list"), HTTP_HX_REQUEST="true")
    assert poll.status_code == 200 and f"run-{others.pk}" not in poll.content.decode()
    others.refresh_from_db()
    assert others.status == Run.Status.QUEUED and not others.cancel_requested
    assert not Run.objects.filter(retry_of=others).exists()


def test_an_operator_sees_every_run_but_controls_none(client, two_runs):
    _, mine, others = two_runs
    client.force_login(make_user("olga", roles.OPERATOR))
    for run in (mine, others):
        assert client.get(reverse("feedback-run-detail", args=[run.pk])).status_code == 200
        assert client.get(reverse("feedback-run-trace-json", args=[run.pk]), {"step": 0}).status_code == 200
        assert client.post(reverse("feedback-run-cancel", args=[run.pk])).status_code == 403
