import json

import pytest
from django.contrib.auth.models import User

from feedback.datasets.imports import MAX_IMPORT_BYTES, ImportRefused, dataset_import
from feedback.models import Dataset, DatasetItem

pytestmark = pytest.mark.django_db

GOOD = {"kind": "arithmetic", "text": "What is 6 times 7?", "expected": 42, "checker": "numeric"}


def test_jsonl_imports_every_line():
    user = User.objects.create_user("ann")
    lines = [json.dumps(GOOD), json.dumps({**GOOD, "text": "Triage", "checker": "labels", "expected": "urgent"})]
    version = dataset_import(name="mixed", user=user, content="\n".join(lines), fmt="jsonl")
    assert version.number == 1
    assert list(version.items.values_list("checker", flat=True)) == ["numeric", "labels"]


def test_csv_imports_with_json_cells():
    user = User.objects.create_user("ann")
    header = "text,kind,expected,checker,checker_options,split\n"
    content = header + '"2+2?",arithmetic,4,numeric,"{""tolerance"": 0.5}",held_out\n'
    version = dataset_import(name="csv", user=user, content=content, fmt="csv")
    item = version.items.get()
    assert (item.expected, item.checker_options, item.split) == (4, {"tolerance": 0.5}, "held_out")


def test_a_bad_line_is_named_and_nothing_is_saved():
    user = User.objects.create_user("ann")
    lines = [json.dumps(GOOD), "{not json", json.dumps({**GOOD, "expected": "forty-two"})]
    with pytest.raises(ImportRefused) as refused:
        dataset_import(name="bad", user=user, content="\n".join(lines), fmt="jsonl")
    assert [n for n, _ in refused.value.errors] == [2, 3]
    assert not Dataset.objects.exists() and not DatasetItem.objects.exists()


def test_too_big_is_refused():
    user = User.objects.create_user("ann")
    with pytest.raises(ImportRefused):
        dataset_import(name="big", user=user, content="x" * (MAX_IMPORT_BYTES + 1), fmt="jsonl")
    assert not Dataset.objects.exists()
