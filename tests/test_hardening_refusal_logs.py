"""A refused request is one log line (status, method, path, who, why) without a traceback; a server
error keeps its traceback. Read as the configured console handler writes it."""

import io
import logging

import pytest
from django.test import Client
from django.urls import reverse

from feedback.logging import RefusalFilter

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("_debug_off")]


@pytest.fixture
def _debug_off(settings):
    settings.DEBUG = False


@pytest.fixture
def log():
    """What the site's console handler (settings.LOGGING) writes during the test."""
    (console,) = [h for h in logging.getLogger().handlers if any(isinstance(f, RefusalFilter) for f in h.filters)]
    written = io.StringIO()
    before = console.setStream(written)
    yield written
    console.setStream(before)


def _lines(log: io.StringIO) -> list[str]:
    return log.getvalue().splitlines()


def test_a_forbidden_page_logs_one_line_without_a_traceback(client, staff, log, caplog):
    client.force_login(staff)
    assert client.get(reverse("feedback-metrics")).status_code == 403
    (line,) = _lines(log)
    assert line.endswith(
        "WARNING django.request [run=None step=None] 403 GET /metrics/ user=staff: Forbidden (Permission denied)"
    )
    assert all(record.exc_info is None for record in caplog.records)


def test_a_missing_page_logs_one_line_with_its_path_escaped(client, staff, log):
    client.force_login(staff)
    assert client.get("/runs/nowhere%0AINFO forged line/").status_code == 404
    (line,) = _lines(log)
    assert line.endswith(r"404 GET /runs/nowhere\nINFO forged line/ user=staff: Not Found")


def test_a_csrf_failure_logs_one_line(db, log):
    assert Client(enforce_csrf_checks=True).post(reverse("login"), {"username": "x"}).status_code == 403
    (line,) = _lines(log)
    assert "django.security.csrf" in line and line.endswith(
        "403 POST /accounts/login/ user=-: Forbidden (CSRF cookie not set.)"
    )


def test_a_suspicious_request_logs_one_line_without_a_traceback(client, log):
    assert client.get("/", headers={"host": "evil.example"}).status_code == 400
    (line,) = _lines(log)
    assert "ERROR django.security.DisallowedHost" in line
    assert "400 GET / user=-: Invalid HTTP_HOST header: 'evil.example'." in line
    assert "Traceback" not in log.getvalue()


def test_a_get_on_a_post_only_address_logs_one_line(client, reviewer, log):
    client.force_login(reviewer)
    assert client.get(reverse("feedback-strategies-mine")).status_code == 405
    (line,) = _lines(log)  # once: not again when the 405 page replaces Django's empty answer
    assert line.endswith("405 GET /strategies/mine/ user=reviewer: Method Not Allowed (GET)")


def test_a_body_too_large_logs_one_line(client, staff, settings, log):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    client.force_login(staff)
    assert client.post(reverse("feedback-run-list"), {"q": "x" * 2000}).status_code == 413
    (line,) = _lines(log)
    assert line.endswith("413 POST /runs/ user=staff: Request Entity Too Large")


@pytest.mark.urls("tests.failing_urls")
def test_a_server_error_keeps_its_traceback(client, operator, log, caplog):
    client.raise_request_exception = False
    client.force_login(operator)
    assert client.get("/fails/").status_code == 500
    written = log.getvalue()
    assert "ERROR django.request [run=None step=None] Internal Server Error: /fails/" in written
    assert "Traceback (most recent call last):" in written and "RuntimeError: a bug in a view" in written
    assert any(record.exc_info is not None for record in caplog.records)
