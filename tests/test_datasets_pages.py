"""The datasets pages: the list, importing (all or nothing, every bad line named, what was typed
kept), a dataset's versions and items; for those who read every run only."""

import pytest
from django.urls import reverse

from feedback.datasets.imports import dataset_import
from feedback.models import Dataset, DatasetItem

pytestmark = pytest.mark.django_db
LIST, IMPORT = reverse("feedback-dataset-list"), reverse("feedback-dataset-import")
GOOD = (
    '{"text": "What is 6 * 7?", "kind": "arithmetic", "expected": 42, "checker": "numeric"}\n'
    '{"text": "Classify <b>this</b>", "kind": "email_triage", "expected": ["urgent"], "checker": "labels",'
    ' "split": "held_out"}\n'
)


def test_a_reviewer_imports_a_dataset_and_sees_its_items_escaped(client, reviewer):
    client.force_login(reviewer)
    response = client.post(IMPORT, {"name": "sums", "format": "jsonl", "content": GOOD})
    dataset = Dataset.objects.get(name="sums")
    assert response.status_code == 302 and response["Location"] == reverse("feedback-dataset-detail", args=[dataset.pk])
    html = client.get(response["Location"]).content.decode()
    assert "2 items" in html and "Numeric (with tolerance)" in html and "Held out" in html
    assert "Classify &lt;b&gt;this&lt;/b&gt;" in html and "<b>this</b>" not in html
    listing = client.get(LIST).content.decode()
    assert f'id="dataset-{dataset.pk}"' in listing and "v1" in listing


def test_an_import_with_a_bad_line_saves_nothing_names_the_line_and_keeps_the_text(client, operator):
    client.force_login(operator)
    bad = GOOD + '{"text": "x", "expected": 1, "checker": "numeric", "checker_options": {"tolerance": -1}}\n'
    response = client.post(IMPORT, {"name": "sums", "format": "jsonl", "content": bad})
    html = response.content.decode()
    assert response.status_code == 400 and not Dataset.objects.exists()
    assert "Nothing was imported" in html and "line 3" in html
    assert "What is 6 * 7?" in html and 'value="sums"' in html  # what was typed is still there


def test_an_upload_is_imported_and_a_second_import_is_a_new_version(client, reviewer):
    from django.core.files.uploadedfile import SimpleUploadedFile

    client.force_login(reviewer)
    csv = "text,kind,expected,checker\nCount the words of report.txt,file_analysis,80,numeric\n"
    client.post(IMPORT, {"name": "files", "format": "csv", "file": SimpleUploadedFile("d.csv", csv.encode())})
    client.post(IMPORT, {"name": "files", "format": "jsonl", "content": GOOD})
    dataset = Dataset.objects.get(name="files")
    assert list(dataset.versions.values_list("number", flat=True)) == [1, 2]
    first = client.get(reverse("feedback-dataset-detail", args=[dataset.pk]), {"version": 1}).content.decode()
    assert "1 item" in first and "Count the words of report.txt" in first
    second = client.get(reverse("feedback-dataset-detail", args=[dataset.pk])).content.decode()
    assert "2 items" in second and "Count the words of report.txt" not in second  # v2: the new file's items


def test_a_non_utf8_file_and_an_empty_form_are_refused_clearly(client, reviewer):
    from django.core.files.uploadedfile import SimpleUploadedFile

    client.force_login(reviewer)
    latin = SimpleUploadedFile("d.csv", "text\nCafé\n".encode("latin-1"))
    assert "not UTF-8 text" in client.post(IMPORT, {"name": "x", "format": "csv", "file": latin}).content.decode()
    assert "Choose a file or paste its text" in client.post(IMPORT, {"name": "x", "format": "csv"}).content.decode()
    assert not Dataset.objects.exists()


def test_staff_see_no_dataset_and_an_item_from_a_private_upload_is_marked(client, staff, operator):
    version = dataset_import(name="sums", user=operator, fmt="jsonl", content=GOOD)
    item = version.items.first()
    DatasetItem.objects.filter(pk=item.pk).update(private_to=staff)
    client.force_login(staff)
    assert client.get(LIST).status_code == 403
    assert client.get(reverse("feedback-dataset-detail", args=[version.dataset_id])).status_code == 403
    assert "Datasets" not in client.get(reverse("feedback-run-list")).content.decode().split("<main")[0]
    client.force_login(operator)
    html = client.get(reverse("feedback-dataset-detail", args=[version.dataset_id])).content.decode()
    assert "private to staff" in html


def test_runs_selected_in_the_run_list_become_a_dataset_with_their_references(client, reviewer, staff):
    from feedback.models import Run

    from .factories import make_finished_run

    right = make_finished_run(output="It is 42.", text="What is 6 * 7?", user=staff)
    referenced = make_finished_run(output="About 80", text="Count report.txt", expected_answer="/\\b80 words/")
    client.force_login(reviewer)
    listing = client.get(reverse("feedback-run-list")).content.decode()
    assert f'id="select-run-{right.pk}"' in listing and 'form="add-to-dataset"' in listing
    response = client.post(
        reverse("feedback-dataset-from-runs"),
        {"run": [right.pk, referenced.pk], "name": "picked", "checker": "numeric"},
    )
    dataset = Dataset.objects.get(name="picked")
    assert response["Location"] == reverse("feedback-dataset-detail", args=[dataset.pk])
    items = {item.source_run_id: item for item in dataset.latest_version().items.all()}
    assert (items[right.pk].checker, items[right.pk].expected) == ("numeric", 42)
    # The task's own reference outranks the run's answer: a regular expression here.
    assert (items[referenced.pk].checker, items[referenced.pk].expected) == ("regex", "\\b80 words")
    assert Run.objects.count() == 2  # nothing else made


def test_staff_select_nothing_and_nobody_adds_runs_they_cannot_see(client, reviewer, staff):
    client.force_login(staff)
    assert 'form="add-to-dataset"' not in client.get(reverse("feedback-run-list")).content.decode()
    client.force_login(reviewer)
    response = client.post(
        reverse("feedback-dataset-from-runs"), {"run": ["999999"], "name": "x", "checker": "contains"}
    )
    assert response.status_code == 302 and not Dataset.objects.exists()


def test_a_strategy_s_evidence_becomes_a_dataset_of_the_runs_with_a_reference(client, reviewer):
    from .factories import make_finished_run
    from .test_strategy_lifecycle import make_strategy

    strategy = make_strategy()
    with_reference = make_finished_run(
        output="I could not find it.",
        text="Summarise release-notes.txt",
        expected_answer="/\\b120 words/",
        status="failed",
    )
    without = make_finished_run(output="No idea.", text="Summarise something", status="failed")
    strategy.evidence.add(with_reference, without)
    client.force_login(reviewer)
    page = client.get(reverse("feedback-strategy-detail", args=[strategy.pk])).content.decode()
    assert 'id="dataset-from-evidence"' in page
    response = client.post(reverse("feedback-dataset-from-evidence", args=[strategy.pk]))
    dataset = Dataset.objects.get(name=f"evidence-{strategy.pk}")
    assert response["Location"] == reverse("feedback-dataset-detail", args=[dataset.pk])
    (item,) = dataset.latest_version().items.all()  # the failing answer is never the expected one
    assert (item.source_run_id, item.checker, item.expected) == (with_reference.pk, "regex", "\\b120 words")
    # No evidence run with a reference: a clear message, nothing made.
    other = make_strategy()
    other.evidence.add(without)
    answer = client.post(reverse("feedback-dataset-from-evidence", args=[other.pk]), follow=True).content.decode()
    assert "None of its evidence runs has an expected answer" in answer
    assert not Dataset.objects.filter(name=f"evidence-{other.pk}").exists()
