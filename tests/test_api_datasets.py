"""The datasets API: list, read a version, import (all or nothing, each bad line named)."""

import pytest

from feedback.models import Dataset

from .api_helpers import call, token_for

pytestmark = pytest.mark.django_db
GOOD = '{"text": "What is 6 * 7?", "kind": "arithmetic", "expected": 42, "checker": "numeric"}\n'


def test_an_import_makes_a_version_that_the_list_and_the_dataset_show(client, reviewer):
    token = token_for(reviewer)
    answer = call(client, "POST", "/datasets", token=token, body={"name": "sums", "format": "jsonl", "content": GOOD})
    assert answer.status_code == 201, answer.content
    body = answer.json()
    assert (body["name"], body["version"], body["items"][0]["expected"], body["items"][0]["checker"]) == (
        "sums",
        1,
        42,
        "numeric",
    )
    listed = call(client, "GET", "/datasets", token=token).json()["data"]
    assert [(d["name"], d["latest_version"], d["items"]) for d in listed] == [("sums", 1, 1)]
    again = call(
        client, "POST", "/datasets", token=token, body={"name": "sums", "format": "jsonl", "content": GOOD * 2}
    )
    assert again.json()["version"] == 2
    first = call(client, "GET", f"/datasets/{body['dataset_id']}?version=1", token=token).json()
    assert (first["version"], len(first["items"])) == (1, 1)


def test_a_bad_line_is_a_400_that_names_it_and_saves_nothing(client, reviewer):
    token = token_for(reviewer)
    bad = GOOD + '{"text": "x", "kind": "no-such-kind"}\n'
    answer = call(client, "POST", "/datasets", token=token, body={"name": "sums", "format": "jsonl", "content": bad})
    assert answer.status_code == 400 and any(e.startswith("line 2:") for e in answer.json()["errors"]["content"])
    assert not Dataset.objects.exists()


def test_staff_and_read_only_tokens_are_refused(client, staff, reviewer):
    assert call(client, "GET", "/datasets", token=token_for(staff)).status_code == 403
    read_only = token_for(reviewer, scope="read")
    body = {"name": "sums", "format": "jsonl", "content": GOOD}
    assert call(client, "POST", "/datasets", token=read_only, body=body).status_code == 403
    assert call(client, "GET", "/datasets/999", token=read_only).status_code == 404
    assert not Dataset.objects.exists()
