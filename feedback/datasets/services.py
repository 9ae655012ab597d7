"""State changes of datasets."""

import uuid

from django.db import transaction

from feedback import quota
from feedback.agent.sandbox import resolve
from feedback.models import DatasetItem, Workspace


@transaction.atomic
def dataset_item_workspace(*, item: DatasetItem) -> Workspace | None:
    """A workspace holding ``item``'s files, for a run of it to start from (None: no files).
    Owned by the item's private owner, so the workspace rules (Workspace.owner) keep it theirs."""
    if not item.files:
        return None
    workspace = Workspace.objects.create(
        name=f"dataset-{uuid.uuid4().hex[:16]}",
        description=f"Files of dataset item {item.pk}",
        owner_id=item.private_to_id,
    )
    root = workspace.path
    root.mkdir(parents=True, exist_ok=True)
    for entry in item.files:
        target = resolve(root, entry["name"])
        if target.parent != root.resolve():
            raise ValueError(f"{entry['name']!r} is not a plain file name.")
        target.write_text(entry["content"], encoding="utf-8")
    workspace.size_bytes = quota.folder_bytes(root)
    workspace.save(update_fields=["size_bytes"])
    return workspace
