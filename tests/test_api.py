"""The JSON API (feedback/api/): tokens, what each endpoint gives, bad input, conflicts, limits,
and its OpenAPI document. Who may call what is tests/test_api_permissions.py's table."""

import hashlib
import re
from datetime import timedelta

import pytest
from django.contrib.staticfiles import finders
from django.test import Client, override_settings
from django.utils import timezone
from openapi_spec_validator import validate

from feedback.models import ApiToken, Evaluation, Run, Step, StepAttempt, Strategy, Task, Workspace

from .api_helpers import call, token_for
from .conftest import make_user
from .factories import make_finished_run, make_run
from .settings_helpers import manage_py_check
from .test_strategy_lifecycle import make_strategy

pytestmark = pytest.mark.django_db


def _created() -> tuple:
    return Task.objects.count(), Run.objects.count(), Workspace.objects.count(), Evaluation.objects.count()


# --- tokens -----------------------------------------------------------------------------------
def test_a_token_is_shown_once_and_stored_only_as_its_hash(client, staff):
    client.force_login(staff)
    page = client.post("/api-tokens/", {"name": "nightly script", "scope": "write", "expires": "30"})
    assert page.status_code == 200 and page["Cache-Control"].startswith("max-age=0")
    raw = re.search(r'value="(afb_[A-Za-z0-9_-]{43})"', page.content.decode()).group(1)
    token = ApiToken.objects.get()
    assert (token.user, token.name, token.scope, token.prefix) == (staff, "nightly script", "write", raw[:12])
    assert token.hashed == hashlib.sha256(raw.encode()).hexdigest()
    assert timedelta(days=29) < token.expires_at - timezone.now() <= timedelta(days=30)
    # The database never holds the token: no column of the row has it, nor any part past the prefix.
    assert not any(raw[12:20] in str(value) for value in ApiToken.objects.values().get().values())
    listed = client.get("/api-tokens/").content.decode()
    assert raw not in listed and f"{raw[:12]}…" in listed and "nightly script" in listed
    me = call(Client(), "GET", "/me", token=raw)
    assert me.json()["username"] == "staff" and me.json()["token"]["prefix"] == raw[:12]
    ApiToken.objects.update(last_used_at=None)
    call(Client(), "GET", "/me", token=raw)
    assert ApiToken.objects.get().last_used_at is not None


def test_a_revoked_token_stops_working_at_once(client, staff):
    raw = token_for(staff)
    assert call(client, "GET", "/me", token=raw).status_code == 200
    client.force_login(staff)
    response = client.post(f"/api-tokens/{ApiToken.objects.get().pk}/revoke/", follow=True)
    assert "is revoked" in response.content.decode() and "Revoked" in response.content.decode()
    refused = call(Client(), "GET", "/me", token=raw)
    assert refused.status_code == 401 and refused.json() == {"detail": "The token was revoked."}
    assert refused["WWW-Authenticate"] == 'Bearer realm="api"'


@pytest.mark.parametrize("header", ["Basic dXNlcjpwdw==", "Bearer", "Token afb_x", "Bearer " + "a" * 300, "bearer"])
def test_a_malformed_authorization_header_is_a_401_not_a_crash(client, header):
    response = client.get("/api/v1/me", headers={"Authorization": header})
    assert response.status_code == 401 and response.json() == {"detail": "The token is not valid."}


def test_a_session_is_not_a_token_and_a_deactivated_account_s_token_is_refused(client, reviewer):
    client.force_login(reviewer)  # a browser's session is no credential for the API
    assert call(client, "GET", "/me").status_code == 401
    raw = token_for(reviewer)
    reviewer.is_active = False
    reviewer.save()
    refused = call(Client(), "GET", "/me", token=raw)
    assert refused.status_code == 401 and "deactivated" in refused.json()["detail"]


def test_a_write_needs_no_csrf_token(reviewer, staff):
    run = make_run(user=staff)
    strict = Client(enforce_csrf_checks=True)
    response = call(strict, "POST", f"/runs/{run.pk}/score", token=token_for(reviewer), body={"score": 0.5})
    assert response.status_code == 201


def test_the_admin_makes_a_token_for_someone_and_shows_it_once(client, staff):
    from django.contrib.auth import get_user_model

    admin = get_user_model().objects.create_superuser("admin", "admin@example.com", "pw")
    client.force_login(admin)
    response = client.post(
        "/admin/feedback/apitoken/add/", {"user": staff.pk, "name": "for staff", "scope": "read", "expires_at": ""}
    )
    assert response.status_code == 200 and "no-store" in response["Cache-Control"]
    raw = re.search(r'value="(afb_[A-Za-z0-9_-]{43})"', response.content.decode()).group(1)
    token = ApiToken.objects.get()
    assert token.user == staff and token.hashed == hashlib.sha256(raw.encode()).hexdigest()
    assert raw not in client.get("/admin/feedback/apitoken/").content.decode()
    assert call(Client(), "GET", "/me", token=raw).json()["token"]["scope"] == "read"
    client.post("/admin/feedback/apitoken/", {"action": "revoke", "_selected_action": [token.pk]})
    assert call(Client(), "GET", "/me", token=raw).status_code == 401


def test_a_token_pasted_into_a_task_is_not_stored(client, staff):
    raw = token_for(staff)
    response = call(client, "POST", "/tasks", token=raw, body={"text": f"Summarise notes.txt, my key is {raw}"})
    assert response.status_code == 201
    assert raw not in Task.objects.get().text and "[secret]" in Task.objects.get().text


# --- bad input --------------------------------------------------------------------------------
BAD_TASKS = [
    ({"text": 5}, "text"),
    ({"text": ["What is 1 + 1?"]}, "text"),
    ({"text": "What is 1 + 1?", "kind": 3}, "kind"),
    ({"text": "What is 1 + 1?", "kind": "poetry"}, "kind"),
    ({"text": "What is 1 + 1?", "workspace_id": "1"}, "workspace_id"),
    ({"text": "What is 1 + 1?", "workspace_id": 999999}, "workspace_id"),
    ({"text": "x" * 4001}, "text"),
    ({"text": "What is\x00 1 + 1?"}, "text"),
    ({"text": "What is 1 + 1?", "expected_answer": "2\x00"}, "expected_answer"),
    ({"text": "What is 1 + 1?", "expected_answer": "\ud800"}, "expected_answer"),
    ({"text": "Hi"}, "text"),
    ({"text": "What is 1 + 1?", "priority": "high"}, "priority"),
    ({"kind": "general"}, "text"),
    ({"text": "Summarise a.txt", "files": [{"name": "../a.txt", "content": "x"}]}, "files.0.name"),
    ({"text": "Summarise a.txt", "files": [{"name": "a.exe", "content": "x"}]}, "files"),
    ({"text": "Summarise a.txt", "files": [{"name": "a.txt", "content": "bin\x00ary"}]}, "files"),
    ({"text": "Summarise a.txt", "files": [{"name": "a.txt"}]}, "files.0.content"),
    ({"text": "Summarise a.txt", "files": [{"name": f"{i}.txt", "content": "x"} for i in range(11)]}, "files"),
]


@pytest.mark.parametrize(("body", "field"), BAD_TASKS)
def test_a_bad_task_is_400_with_its_field_and_creates_nothing(client, staff, demo_workspace, settings, body, field):
    before, folders = _created(), sorted(p.name for p in settings.WORKSPACES_ROOT.iterdir())
    response = call(client, "POST", "/tasks", token=token_for(staff), body=body)
    assert response.status_code == 400, response.content
    assert response.json()["detail"] == "The request is not valid: see errors."
    assert field in response.json()["errors"] and all(response.json()["errors"][field])
    assert _created() == before and sorted(p.name for p in settings.WORKSPACES_ROOT.iterdir()) == folders


def test_another_persons_uploads_are_no_workspace_for_staff(client, staff):
    theirs = Workspace.objects.create(name="upload-theirs", owner=make_user("other", "staff"))
    body = {"text": "List it", "workspace_id": theirs.pk}
    response = call(client, "POST", "/tasks", token=token_for(staff), body=body)
    assert response.status_code == 400 and "workspace_id" in response.json()["errors"]
    assert [w["name"] for w in call(client, "GET", "/workspaces", token=token_for(staff)).json()] == []


def test_bodies_that_are_not_json_or_too_big_are_refused(client, staff, settings):
    token = token_for(staff)
    broken = call(client, "POST", "/tasks", token=token, raw='{"text": "What is')
    assert broken.status_code == 400 and broken.json() == {"detail": "The request body is not valid JSON."}
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    huge = call(client, "POST", "/tasks", token=token, body={"text": "x" * 2000})
    assert huge.status_code == 413 and "too large" in huge.json()["detail"]
    assert Task.objects.count() == 0


def test_a_task_with_files_runs_on_a_new_workspace_of_its_author(client, staff, demo_workspace):
    body = {"kind": "file_analysis", "text": "Summarise notes.md", "workspace_id": demo_workspace.pk,
            "files": [{"name": "notes.md", "content": "# Notes\nship friday"}]}  # fmt: skip
    response = call(client, "POST", "/tasks", token=token_for(staff), body=body)
    assert response.status_code == 201 and response["Location"] == f"/api/v1/runs/{response.json()['id']}"
    workspace = Task.objects.get().workspace
    assert workspace.owner == staff and (workspace.path / "notes.md").read_text() == "# Notes\nship friday"
    assert (workspace.path / "report.txt").exists()  # on top of the chosen workspace


BAD_SCORES = [
    ({"score": 1.5}, "score"), ({"score": "0.5"}, "score"), ({"score": 0.5, "outcome": "maybe"}, "outcome"),
    ({"score": 0.5, "comment": "a\x00b"}, "comment"), ({}, "score"), ({"score": 0.5, "stars": 4}, "stars"),
]  # fmt: skip


@pytest.mark.parametrize(("body", "field"), BAD_SCORES)
def test_a_bad_score_is_400_and_records_nothing(client, reviewer, body, field):
    run = make_finished_run(output="4")
    response = call(client, "POST", f"/runs/{run.pk}/score", token=token_for(reviewer), body=body)
    assert response.status_code == 400 and field in response.json()["errors"]
    assert not Evaluation.objects.exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [({"action": "approve"}, "reason"), ({"action": "approve", "reason": "   "}, "reason"),
     ({"action": "merge", "reason": "why not"}, "action"),
     ({"action": "approve", "reason": "ok", "trial_fraction": 1.0}, "trial_fraction")],
)  # fmt: skip
def test_a_bad_decision_is_400_and_changes_nothing(client, reviewer, body, field):
    strategy = make_strategy()
    response = call(client, "POST", f"/strategies/{strategy.pk}/decisions", token=token_for(reviewer), body=body)
    assert response.status_code == 400 and field in response.json()["errors"]
    strategy.refresh_from_db()
    assert strategy.status == Strategy.Status.PROPOSED and not strategy.events.exists()


@pytest.mark.parametrize(
    ("query", "field"),
    [("status=lost", "status"), ("score_min=2", "score_min"), ("error=zz", "error"), ("tool=shell", "tool"),
     ("strategy=999999", "strategy"), ("since=2026-13-01", "since"), ("until=0", "until"), ("limit=0", "limit"),
     ("limit=101", "limit"),
     ("stauts=failed", "stauts"), ("cursor=not-a-cursor", "cursor"), ("q=a%00b", "q")],
)  # fmt: skip
def test_a_bad_run_filter_is_400_naming_it(client, operator, query, field):
    response = client.get(f"/api/v1/runs?{query}", headers={"Authorization": f"Bearer {token_for(operator)}"})
    assert response.status_code == 400 and list(response.json()["errors"]) == [field]


# --- reading runs -------------------------------------------------------------------------------
def test_run_pages_neither_skip_nor_repeat_and_filters_apply(client, operator):
    created = timezone.now() - timedelta(hours=1)
    runs = [make_run(text=f"task {i}", created_at=created + timedelta(minutes=i), score=i / 10,
                     status=Run.Status.FAILED if i % 3 == 0 else Run.Status.QUEUED) for i in range(8)]  # fmt: skip
    token = token_for(operator)

    def page(query: str) -> dict:
        response = client.get(f"/api/v1/runs?{query}", headers={"Authorization": f"Bearer {token}"})
        assert response.status_code == 200, response.content
        return response.json()

    first = page("limit=3")
    second = page(f"limit=3&cursor={first['next_cursor']}")
    third = page(f"limit=3&cursor={second['next_cursor']}")
    ids = [row["id"] for p in (first, second, third) for row in p["data"]]
    assert ids == [run.pk for run in reversed(runs)] and third["next_cursor"] is None
    assert [row["id"] for row in page(f"limit=3&cursor={third['previous_cursor']}")["data"]] == ids[3:6]
    by_score = page("sort=score&limit=2")
    assert [row["score"] for row in by_score["data"]] == [0.7, 0.6]
    wrong_order = client.get(
        f"/api/v1/runs?sort=oldest&cursor={by_score['next_cursor']}", headers={"Authorization": f"Bearer {token}"}
    )
    assert wrong_order.status_code == 400 and "score" in wrong_order.json()["errors"]["cursor"][0]
    assert [row["id"] for row in page("status=failed")["data"]] == [runs[6].pk, runs[3].pk, runs[0].pk]
    assert [row["id"] for row in page("score_min=0.35&score_max=0.55")["data"]] == [runs[5].pk, runs[4].pk]
    assert [row["id"] for row in page("q=task")["data"]][:1] == [runs[7].pk]


def test_a_run_reads_with_its_trace_a_page_at_a_time(client, operator, reviewer):
    run = make_finished_run(output="42", user=make_user("author", "staff"), cost=0.0125)
    for index in range(5):
        step = Step.objects.create(
            run=run,
            index=index,
            kind=Step.Kind.TOOL_CALL,
            tool_name="calculator",
            arguments={"expression": f"{index} + 1"},
            success=index != 2,
            cost=0.0025,
            attempts=2 if index == 4 else 1,
        )
    # The last call was retried: its first try timed out (the recorder keeps both attempts).
    StepAttempt.objects.create(
        step=step, number=1, started_at=timezone.now(), duration_ms=5, error="timeout", retryable=True
    )
    call(client, "POST", f"/runs/{run.pk}/score", token=token_for(reviewer), body={"score": 0.9, "comment": "fine"})
    token = token_for(operator)
    detail = call(client, "GET", f"/runs/{run.pk}", token=token).json()
    facts = (detail["final_output"], detail["status"], detail["score"], detail["task"]["created_by"])
    assert facts == ("42", "succeeded", 0.9, "author")
    assert detail["cost"] == 0.0125  # what the run cost, as the run page shows it
    assert [(e["kind"], e["author"], e["feedback"]) for e in detail["evaluations"]] == [("human", "reviewer", "fine")]
    pages, after = [], -1
    while True:
        page = call(client, "GET", f"/runs/{run.pk}/steps?after={after}&limit=2", token=token).json()
        pages.append([s["index"] for s in page["data"]])
        after = page["next_after"]
        if not page["has_more"]:
            break
    assert pages == [[0, 1], [2, 3], [4]]
    assert page["data"][0]["attempts"][0]["error"] == "timeout" and page["data"][0]["cost"] == 0.0025
    assert call(client, "GET", f"/runs/{run.pk}/steps/9", token=token).status_code == 404


def test_a_reviewers_score_sets_the_runs_score_and_outcome(client, reviewer):
    run = make_finished_run(output="I could not find it.")
    body = {"score": 0.2, "outcome": "not_accomplished", "comment": "gave up", "corrected_answer": "4"}
    response = call(client, "POST", f"/runs/{run.pk}/score", token=token_for(reviewer), body=body)
    assert response.status_code == 201
    assert response.json()["evaluation"]["corrected_answer"] == "4"
    run.refresh_from_db()
    assert (run.score, run.outcome) == (0.2, "not_accomplished")
    assert Evaluation.objects.get().author == reviewer


def test_a_decision_someone_else_made_first_is_409(client, reviewer):
    strategy = make_strategy()
    first, second = token_for(reviewer), token_for(make_user("second", "reviewer"))
    url = f"/strategies/{strategy.pk}/decisions"
    assert call(client, "POST", url, token=first, body={"action": "approve", "reason": "try it"}).status_code == 200
    late = call(client, "POST", url, token=second, body={"action": "reject", "reason": "no"})
    assert late.status_code == 409 and late.json()["detail"] == "A strategy that is on trial cannot be rejected."
    strategy.refresh_from_db()
    assert strategy.status == Strategy.Status.TRIAL and strategy.events.count() == 1
    detail = call(client, "GET", f"/strategies/{strategy.pk}", token=second).json()
    assert detail["trial"]["recommendation"] == "collect_more" and detail["events"][0]["actor"] == "reviewer"
    reject = {"action": "reject", "reason": "x"}
    missing = call(client, "POST", "/strategies/999999/decisions", token=first, body=reject)
    assert missing.status_code == 404


def test_strategies_list_by_status_a_page_at_a_time(client, operator):
    made = [make_strategy(pattern_key=f"k{i}", status="trial" if i % 2 else "proposed") for i in range(5)]
    token = token_for(operator)
    first = call(client, "GET", "/strategies?limit=2", token=token).json()
    second = call(client, "GET", f"/strategies?limit=2&cursor={first['next_cursor']}", token=token).json()
    assert [s["id"] for s in first["data"] + second["data"]] == [s.pk for s in reversed(made)][:4]
    on_trial = call(client, "GET", "/strategies?status=trial", token=token).json()["data"]
    assert [s["id"] for s in on_trial] == [made[3].pk, made[1].pk]


def test_metrics_follow_the_metrics_page(client, operator):
    make_finished_run(output="4")
    token = token_for(operator)
    week = call(client, "GET", "/metrics?days=7&granularity=week&kind=arithmetic", token=token).json()
    assert week["granularity"] == "week" and week["scores"]["runs"] == 1
    assert sum(p["scores"]["runs"] for p in week["periods"]) == 1
    assert call(client, "GET", "/metrics?days=8", token=token).status_code == 400


def test_a_method_an_endpoint_does_not_take_is_a_json_405(client, operator):
    response = call(client, "DELETE", "/runs", token=token_for(operator))
    assert response.status_code == 405 and response["Allow"] == "GET"
    assert response.json() == {"detail": "Use GET here."}


# --- limits -----------------------------------------------------------------------------------
@override_settings(API_RATE_LIMIT="3/min")
def test_a_token_past_its_rate_gets_429_with_retry_after(client, operator):
    token, other = token_for(operator), token_for(operator)
    assert [call(client, "GET", "/me", token=token).status_code for _ in range(3)] == [200, 200, 200]
    refused = call(client, "GET", "/me", token=token)
    assert refused.status_code == 429 and 1 <= int(refused["Retry-After"]) <= 60
    assert refused.json()["detail"] == f"Too many requests: try again in {refused['Retry-After']} s."
    assert call(client, "GET", "/me", token=other).status_code == 200  # per token, not per account


@override_settings(API_AUTH_FAILURE_LIMIT="3/15min")
def test_an_address_that_keeps_failing_to_authenticate_is_refused_whatever_it_sends(client, operator):
    good = token_for(operator)
    assert call(client, "GET", "/me").status_code == 401  # no token is no guess: not counted
    assert [call(client, "GET", "/me", token=f"afb_guess{i}").status_code for i in range(3)] == [401, 401, 401]
    refused = call(client, "GET", "/me", token=good)
    assert refused.status_code == 429 and int(refused["Retry-After"]) <= 15 * 60
    elsewhere = Client(REMOTE_ADDR="192.0.2.7")
    assert call(elsewhere, "GET", "/me", token=good).status_code == 200


def test_a_limit_that_cannot_be_read_stops_the_server(tmp_path):
    # As the server starts: `manage.py check` (and migrate, runserver) in a process of its own.
    refused = manage_py_check(tmp_path, API_RATE_LIMIT="lots")
    assert refused.returncode != 0
    assert "(feedback.E001) API_RATE_LIMIT='lots' is not valid: API_RATE_LIMIT is N/period" in refused.stderr
    assert manage_py_check(tmp_path, API_RATE_LIMIT="0").returncode == 0


# --- the OpenAPI document and its page -----------------------------------------------------------
ENDPOINTS = {
    ("post", "/api/v1/tasks"), ("get", "/api/v1/workspaces"), ("get", "/api/v1/me"), ("get", "/api/v1/metrics"),
    ("get", "/api/v1/runs"), ("get", "/api/v1/runs/{run_id}"), ("get", "/api/v1/runs/{run_id}/steps"),
    ("get", "/api/v1/runs/{run_id}/steps/{index}"), ("post", "/api/v1/runs/{run_id}/score"),
    ("post", "/api/v1/runs/{run_id}/rerun"), ("post", "/api/v1/runs/{run_id}/cancel"), ("get", "/api/v1/score-configs"),
    ("get", "/api/v1/strategies"), ("get", "/api/v1/strategies/{strategy_id}"),
    ("post", "/api/v1/strategies/{strategy_id}/decisions"),
    ("get", "/api/v1/confirmations"), ("post", "/api/v1/confirmations/{confirmation_id}/decide"),
    ("get", "/api/v1/datasets"), ("get", "/api/v1/datasets/{dataset_id}"), ("post", "/api/v1/datasets"),
}  # fmt: skip


def test_the_openapi_document_is_valid_and_lists_every_endpoint(client):
    response = client.get("/api/v1/openapi.json")
    assert response.status_code == 200
    document = response.json()
    validate(document)  # OpenAPI 3.1, by openapi-spec-validator
    operations = {(m, path): op for path, ops in document["paths"].items() for m, op in ops.items()}
    assert set(operations) == ENDPOINTS
    assert document["components"]["securitySchemes"] == {"BearerToken": {"type": "http", "scheme": "bearer"}}
    for operation in operations.values():
        assert operation["security"] == [{"BearerToken": []}]
        assert {"401", "403", "429"} <= set(operation["responses"])
    assert operations[("post", "/api/v1/tasks")]["requestBody"]["content"]["application/json"]


def test_the_docs_page_loads_only_this_sites_files(client):
    html = client.get("/api/v1/docs").content.decode()
    assets = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert assets and all(a.startswith("/static/ninja/") for a in assets), assets
    assert all(finders.find(a.removeprefix("/static/")) for a in assets)
    assert '"validatorUrl": null' in html and "http" not in html.replace('"url": "/api/v1/openapi.json"', "")
