"""No answer of the API is kept by a cache on the way (``Cache-Control: no-store``): each is one
account's data, and a refusal must not outlive its request either."""

import pytest
from django.test import Client

from feedback.api import tasks as task_endpoints
from feedback.models import ApiToken

from .api_helpers import call, token_for
from .conftest import make_user

TASK = {"kind": "arithmetic", "text": "What is 6 * 7?"}


def _broken(window):
    raise RuntimeError("boom")


# (what, method, path, token scope or None for no token, body, expected status)
ANSWERS = [
    ("who I am", "GET", "/me", "write", None, 200),
    ("the run list", "GET", "/runs", "write", None, 200),
    ("a submitted task", "POST", "/tasks", "write", TASK, 201),
    ("a bad task", "POST", "/tasks", "write", {"text": 5}, 400),
    ("no token", "GET", "/me", None, None, 401),
    ("a read-only token's write", "POST", "/tasks", "read", TASK, 403),
    ("someone else's run", "GET", "/runs/999999", "write", None, 404),
    ("a method not taken", "DELETE", "/me", "write", None, 405),
    ("a server error", "GET", "/metrics", "write", None, 500),
]


@pytest.mark.parametrize(
    ("method", "path", "scope", "body", "status"), [a[1:] for a in ANSWERS], ids=[a[0] for a in ANSWERS]
)
def test_every_api_answer_is_no_store(db, monkeypatch, sent_tasks, method, path, scope, body, status):
    monkeypatch.setattr(task_endpoints.metrics, "period_counts", _broken)
    user = make_user("everyone", "staff", "operator")
    token = token_for(user, scope=ApiToken.Scope.WRITE if scope == "write" else ApiToken.Scope.READ) if scope else None

    response = call(Client(raise_request_exception=False), method, path, token=token, body=body)

    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith("application/json")
    assert response["Cache-Control"] == "no-store"


def test_a_throttled_answer_is_no_store(client, operator, settings):
    settings.API_RATE_LIMIT = "1/min"
    token = token_for(operator)
    assert call(client, "GET", "/me", token=token).status_code == 200
    response = call(client, "GET", "/me", token=token)
    assert response.status_code == 429 and response["Cache-Control"] == "no-store"


def test_a_replayed_and_a_refused_idempotent_answer_are_no_store(client, staff, sent_tasks):
    token = token_for(staff)
    headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": "k"}
    for body, status in ((TASK, 201), (TASK, 201), ({**TASK, "text": "What is 1 + 1?"}, 422)):
        response = client.post("/api/v1/tasks", data=body, content_type="application/json", headers=headers)
        assert (response.status_code, response["Cache-Control"]) == (status, "no-store")


@pytest.mark.parametrize("path", ["/api/v1/nope", "/api/v1/runs/1/nope", "/api/v1/me/"])
def test_a_path_no_endpoint_has_is_a_json_404_not_the_sites_page(client, path):
    response = client.get(path)
    assert response.status_code == 404
    assert response.json() == {"detail": "Not found."} and response["Cache-Control"] == "no-store"
