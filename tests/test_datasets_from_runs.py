import pytest
from django.contrib.auth.models import User

from feedback.datasets.services import dataset_from_runs
from feedback.models import Dataset, Run, Task, Workspace

pytestmark = pytest.mark.django_db


def _run(user, text, answer, workspace=None):
    task = Task.objects.create(text=text, kind="arithmetic", created_by=user, workspace=workspace)
    return Run.objects.create(task=task, task_kind="arithmetic", status="succeeded", final_output=answer)


def test_selected_runs_become_items_of_a_new_version():
    user = User.objects.create_user("rev")
    first = dataset_from_runs(runs=[_run(user, "6*7?", "It is 42.")], user=user, checker="numeric", name="sums")
    second = dataset_from_runs(runs=[_run(user, "1+1?", "2")], user=user, checker="numeric", dataset=first.dataset)
    assert first.items.get().expected == 42
    assert second.number == 2 and list(second.items.values_list("expected", flat=True)) == [42, 2]


def test_a_run_on_a_private_upload_makes_a_private_item():
    owner = User.objects.create_user("own")
    upload = Workspace.objects.create(name="upload-x", owner=owner)
    version = dataset_from_runs(
        runs=[_run(owner, "sum it", "10", workspace=upload)], user=owner, checker="numeric", name="p"
    )
    assert version.items.get().private_to == owner


def test_an_item_copies_its_run_s_workspace_text_files_and_a_too_large_one_is_refused(settings, tmp_path):
    from django.core.exceptions import ValidationError

    from feedback.datasets.services import dataset_item_workspace
    from feedback.models.dataset import FILES_MAX_BYTES

    user = User.objects.create_user("rev")
    workspace = Workspace.objects.create(name="ws-files")
    (workspace.path / "docs").mkdir(parents=True)
    (workspace.path / "docs" / "notes.md").write_text("seven words are in this file here")
    (workspace.path / "report.txt").write_text("hello")
    (workspace.path / ".secret").write_text("hidden")
    (workspace.path / "logo.bin").write_bytes(b"\xff\xfe\x00\x01")
    version = dataset_from_runs(
        runs=[_run(user, "Count words in notes.md", "7", workspace=workspace)], user=user, checker="numeric", name="w"
    )
    item = version.items.get()
    assert item.files == [
        {"name": "docs/notes.md", "content": "seven words are in this file here"},
        {"name": "report.txt", "content": "hello"},
    ]
    # A run of the item starts from the same folders and files.
    copy = dataset_item_workspace(item=item)
    assert (copy.path / "docs" / "notes.md").read_text() == "seven words are in this file here"
    assert copy.path != workspace.path
    (workspace.path / "big.txt").write_text("x" * (FILES_MAX_BYTES + 1))
    with pytest.raises(ValidationError, match="too much to copy"):
        dataset_from_runs(runs=[_run(user, "again", "7", workspace=workspace)], user=user, checker="numeric", name="w2")
    assert not Dataset.objects.filter(name="w2").exists()
