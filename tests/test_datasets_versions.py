import pytest
from django.contrib.auth.models import Permission, User
from django.core.exceptions import ValidationError

from feedback.datasets.services import dataset_item_workspace, dataset_version_create, item_can_use
from feedback.models import Dataset, DatasetItem

pytestmark = pytest.mark.django_db

ITEM = {"kind": "arithmetic", "text": "What is 2 + 2?", "expected": 4, "checker": "numeric"}


def test_a_change_makes_a_new_version_and_leaves_the_old_one_unchanged():
    user = User.objects.create_user("ann")
    dataset = Dataset.objects.create(name="sums", created_by=user)
    v1 = dataset_version_create(dataset=dataset, user=user, items=[ITEM])
    v2 = dataset_version_create(dataset=dataset, user=user, base=v1, items=[{**ITEM, "text": "3 + 3?", "expected": 6}])
    assert (v1.number, v2.number) == (1, 2)
    assert list(v1.items.values_list("text", flat=True)) == ["What is 2 + 2?"]
    assert list(v2.items.values_list("text", "position")) == [("What is 2 + 2?", 1), ("3 + 3?", 2)]


def test_a_bad_item_saves_nothing():
    user = User.objects.create_user("ann")
    dataset = Dataset.objects.create(name="sums")
    with pytest.raises(ValidationError):
        dataset_version_create(dataset=dataset, user=user, items=[ITEM, {**ITEM, "expected": "four"}])
    assert not dataset.versions.exists() and not DatasetItem.objects.exists()


def test_a_private_item_is_usable_only_by_its_owner_and_readers_of_every_run(settings, tmp_path):
    settings.WORKSPACES_ROOT = str(tmp_path)
    owner, other, operator = (User.objects.create_user(n) for n in ("own", "other", "op"))
    operator.user_permissions.add(Permission.objects.get(codename="view_run"))
    operator = User.objects.get(pk=operator.pk)
    dataset = Dataset.objects.create(name="files")
    files = [{"name": "notes.txt", "content": "secret"}]
    version = dataset_version_create(dataset=dataset, user=owner, items=[{**ITEM, "files": files}])
    item = version.items.get()
    item.private_to = owner
    assert item_can_use(item=item, user=owner) and item_can_use(item=item, user=operator)
    assert not item_can_use(item=item, user=other)
    workspace = dataset_item_workspace(item=item)
    assert workspace.owner == owner
    assert (workspace.path / "notes.txt").read_text() == "secret"
