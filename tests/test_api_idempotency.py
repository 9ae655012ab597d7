"""POST /api/v1/tasks under retry: an ``Idempotency-Key`` makes a request that is sent again (its
answer lost on the way) the same request: the first answer, and one run."""

import subprocess
import sys
import threading
from datetime import timedelta

import pytest
from django.conf import settings as django_settings
from django.db import connection
from django.test import Client
from django.utils import timezone

from feedback import queue
from feedback.api.idempotency import purge_expired
from feedback.models import IdempotencyKey, Run, Task

from .api_helpers import token_for
from .conftest import make_user

TASK = {"kind": "arithmetic", "text": "What is 6 * 7?", "expected_answer": "42"}


def _post(client: Client, token: str, body: dict, key: str | None):
    headers = {"Authorization": f"Bearer {token}"}
    if key is not None:
        headers["Idempotency-Key"] = key
    return client.post("/api/v1/tasks", data=body, content_type="application/json", headers=headers)


def _executions(sent_tasks) -> list[int]:
    return [args[0] for name, args, _kwargs in sent_tasks if name == queue.RUN_EXECUTE]


def test_a_retry_with_the_same_key_answers_the_first_run_and_queues_nothing_more(
    client, staff, sent_tasks, django_capture_on_commit_callbacks
):
    token = token_for(staff)
    with django_capture_on_commit_callbacks(execute=True):
        first = _post(client, token, TASK, "4f1c2a9e-retry")
        # The same body written otherwise (fields in another order) is the same request.
        retry = _post(client, token, dict(reversed(TASK.items())), "4f1c2a9e-retry")

    assert first.status_code == retry.status_code == 201
    assert retry.json() == first.json()
    assert retry["Location"] == first["Location"] == f"/api/v1/runs/{first.json()['id']}"
    assert retry["Idempotent-Replayed"] == "true" and not first.has_header("Idempotent-Replayed")
    assert list(Run.objects.values_list("pk", flat=True)) == [first.json()["id"]]
    assert _executions(sent_tasks) == [first.json()["id"]]


def test_without_a_key_each_request_is_a_new_run(client, staff, sent_tasks):
    token = token_for(staff)
    ids = [_post(client, token, TASK, None).json()["id"] for _ in range(2)]
    assert len(set(ids)) == 2 and Run.objects.count() == 2 and IdempotencyKey.objects.count() == 0


def test_the_same_key_with_another_body_is_422_and_creates_nothing(
    client, staff, sent_tasks, django_capture_on_commit_callbacks
):
    token = token_for(staff)
    with django_capture_on_commit_callbacks(execute=True):
        first = _post(client, token, TASK, "key-1")
        other = _post(client, token, {**TASK, "text": "What is 7 * 8?"}, "key-1")

    assert other.status_code == 422
    assert other.json() == {
        "detail": "This Idempotency-Key was sent with a different request: send a new key with a new request."
    }
    assert list(Task.objects.values_list("text", flat=True)) == ["What is 6 * 7?"]
    assert _executions(sent_tasks) == [first.json()["id"]]


def test_keys_are_the_callers_own(client, staff, sent_tasks):
    other = make_user("other-staff", "staff")
    mine = _post(client, token_for(staff), TASK, "shared-key")
    theirs = _post(client, token_for(other), TASK, "shared-key")

    assert mine.status_code == theirs.status_code == 201 and mine.json()["id"] != theirs.json()["id"]
    assert theirs.json()["created_by"] == "other-staff" and not theirs.has_header("Idempotent-Replayed")
    # Even a key's existence is the caller's: another body under it is not refused for someone else.
    assert _post(client, token_for(other), {**TASK, "text": "What is 2 + 2?"}, "mine-only").status_code == 201
    assert _post(client, token_for(staff), TASK, "mine-only").status_code == 201


def test_a_key_past_its_retention_period_starts_a_new_run(client, staff, settings, sent_tasks):
    settings.API_IDEMPOTENCY_KEY_HOURS = 2
    token = token_for(staff)
    first = _post(client, token, TASK, "old-key").json()["id"]
    IdempotencyKey.objects.update(created_at=timezone.now() - timedelta(hours=1))
    assert _post(client, token, {**TASK, "text": "What is 1 + 2?"}, "old-key").status_code == 422  # still kept
    IdempotencyKey.objects.update(created_at=timezone.now() - timedelta(hours=2, seconds=1))

    again = _post(client, token, {**TASK, "text": "What is 1 + 2?"}, "old-key")

    assert again.status_code == 201 and again.json()["id"] != first and not again.has_header("Idempotent-Replayed")
    assert list(IdempotencyKey.objects.values_list("response__id", flat=True)) == [again.json()["id"]]


def test_a_refused_request_keeps_nothing_under_its_key(client, staff, sent_tasks):
    token = token_for(staff)
    refused = _post(client, token, {**TASK, "text": "Hi"}, "fix-and-retry")
    assert refused.status_code == 400 and "text" in refused.json()["errors"]
    assert IdempotencyKey.objects.count() == 0

    fixed = _post(client, token, TASK, "fix-and-retry")

    assert fixed.status_code == 201 and Run.objects.get().pk == fixed.json()["id"]


def test_a_quoted_key_is_the_same_key(client, staff, sent_tasks):
    # draft-ietf-httpapi-idempotency-key-header writes the key as a structured-field string.
    token = token_for(staff)
    first = _post(client, token, TASK, "8e03978e-40d5-43e8-bc93-6894a57f9324")
    quoted = _post(client, token, TASK, '"8e03978e-40d5-43e8-bc93-6894a57f9324"')
    assert quoted.json()["id"] == first.json()["id"] and quoted["Idempotent-Replayed"] == "true"


@pytest.mark.parametrize("key", ["", "   ", "k" * 256, "two words", "clé"])
def test_a_key_that_cannot_be_one_is_400_naming_the_header(client, staff, sent_tasks, key):
    response = _post(client, token_for(staff), TASK, key)
    assert response.status_code == 400
    assert response.json()["errors"] == {
        "Idempotency-Key": ["An idempotency key is 1 to 255 visible ASCII characters, e.g. a UUID."]
    }
    assert Run.objects.count() == 0


def test_a_read_only_token_is_refused_whatever_its_key(client, staff, sent_tasks):
    from feedback.models import ApiToken

    response = _post(client, token_for(staff, scope=ApiToken.Scope.READ), TASK, "read-only")
    assert response.status_code == 403 and IdempotencyKey.objects.count() == 0


def test_expired_keys_are_purged_and_beat_does_it_hourly(client, staff, settings, sent_tasks):
    settings.API_IDEMPOTENCY_KEY_HOURS = 24
    token = token_for(staff)
    for key in ("old", "new"):
        _post(client, token, {**TASK, "text": f"What is 6 * 7? ({key})"}, key)
    IdempotencyKey.objects.filter(key="old").update(created_at=timezone.now() - timedelta(hours=25))

    assert purge_expired() == 1

    assert list(IdempotencyKey.objects.values_list("key", flat=True)) == ["new"]
    assert Run.objects.count() == 2  # the runs stay: only the keys go
    schedule = {entry["task"]: entry["schedule"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert schedule["feedback.tasks.idempotency_keys_purge_task"] == 3600.0


def test_the_openapi_document_describes_the_header_and_its_422(client):
    operation = client.get("/api/v1/openapi.json").json()["paths"]["/api/v1/tasks"]["post"]
    (header,) = [p for p in operation["parameters"] if p["name"] == "Idempotency-Key"]
    assert header["in"] == "header" and header["required"] is False and "422" in header["description"]
    assert operation["responses"]["422"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ErrorOut"
    }
    assert "Idempotency-Key" in operation["description"]


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
def test_concurrent_requests_with_the_same_key_make_exactly_one_run(sent_tasks):
    token = token_for(make_user("racing-staff", "staff"))
    requests = 8
    start = threading.Barrier(requests)
    answers = [None] * requests

    def submit(i: int) -> None:
        try:
            start.wait()
            answers[i] = _post(Client(), token, TASK, "raced-key")
        finally:
            connection.close()

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(requests)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert [a.status_code for a in answers] == [201] * requests
    (run_id,) = set(a.json()["id"] for a in answers)
    assert list(Run.objects.values_list("pk", flat=True)) == [run_id]
    assert sum(not a.has_header("Idempotent-Replayed") for a in answers) == 1
    assert _executions(sent_tasks) == [run_id]


def test_a_retention_period_under_an_hour_stops_the_server_at_start(tmp_path):
    # 0 would silently turn the header off: every key expired at once.
    env = {"PATH": "/usr/bin:/bin", "VAR_DIR": str(tmp_path), "API_IDEMPOTENCY_KEY_HOURS": "0"}
    check = subprocess.run([sys.executable, "manage.py", "check"], cwd=django_settings.BASE_DIR, env=env,
                           capture_output=True, text=True)  # fmt: skip
    assert check.returncode != 0
    assert "API_IDEMPOTENCY_KEY_HOURS='0' is not valid: API_IDEMPOTENCY_KEY_HOURS is a whole number of at least 1." in (
        check.stderr
    )
