import pytest
from django.contrib.auth.models import User

from feedback.datasets.services import dataset_from_runs
from feedback.models import Run, Task, Workspace

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
