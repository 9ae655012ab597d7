"""State changes of datasets."""

import uuid

from django.db import transaction
from django.utils.translation import gettext as _

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
        target = resolve(root, entry["name"])  # SandboxError for a path leaving the workspace
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(entry["content"], encoding="utf-8")
    workspace.size_bytes = quota.folder_bytes(root)
    workspace.save(update_fields=["size_bytes"])
    return workspace


def item_can_use(*, item: DatasetItem, user) -> bool:
    """A private item is its owner's and readable by those who read every run (Workspace.owner's rule)."""
    return item.private_to_id is None or item.private_to_id == user.pk or user.has_perm("feedback.view_run")


@transaction.atomic
def dataset_version_create(*, dataset, user, items: list[dict], note: str = "", base=None):
    """A new version of ``dataset``: ``base``'s items (copied, never changed) followed by ``items``.
    Each item is validated first (checker options, files): nothing is saved unless all pass."""
    from django.db.models import Max

    from feedback.models import DatasetVersion

    copied = [
        {f: getattr(i, f) for f in _FIELDS} | {"source_run_id": i.source_run_id, "private_to_id": i.private_to_id}
        for i in (base.items.all() if base is not None else [])
    ]
    rows = [DatasetItem(position=n, **fields) for n, fields in enumerate(copied + items, start=1)]
    for row in rows:
        row.full_clean(exclude=["version"])
    number = (dataset.versions.aggregate(n=Max("number"))["n"] or 0) + 1
    version = DatasetVersion.objects.create(dataset=dataset, number=number, created_by=user, note=note)
    for row in rows:
        row.version = version
    DatasetItem.objects.bulk_create(rows)
    return version


_FIELDS = ("kind", "text", "files", "expected", "checker", "checker_options", "split")


def workspace_files(workspace: Workspace | None) -> list[dict]:
    """The workspace's text files as an item's files (``[{"name": "docs/a.md", "content": ...}]``),
    so a run of the item starts from what the original run had. Hidden and non-text files are
    left out; more text than an item holds is refused (ValidationError), never cut silently."""
    from django.core.exceptions import ValidationError

    from feedback.models.dataset import FILES_MAX_BYTES

    if workspace is None or not workspace.path.is_dir():
        return []
    files, total = [], 0
    root = workspace.path
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        relative = path.relative_to(root)
        if any(part.startswith(".") for part in relative.parts) or len(relative.parts) > 5:
            continue
        try:
            content = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # not text: an item holds text files only
        total += len(content.encode())
        if total > FILES_MAX_BYTES:
            raise ValidationError(
                _("The workspace %(name)s holds more than %(n)s bytes of text: too much to copy into an item.")
                % {"name": workspace.name, "n": FILES_MAX_BYTES}
            )
        files.append({"name": relative.as_posix(), "content": content})
    return files


def _item_from_run(run, *, checker: str, files: dict | None = None) -> dict:
    task = run.task
    workspace = task.workspace
    # A run on a private upload makes a private item (its files are the uploader's).
    private_to = workspace.owner_id if workspace is not None and workspace.owner_id else None
    if task.expected_answer.strip():
        # The person's own reference outranks the run's answer (which may be the failure itself).
        checker, expected = reference_checker(task.expected_answer)
    else:
        expected = run.final_output.strip()
        if checker == "numeric":
            from .checkers import numbers_in

            figures = numbers_in(run.final_output)
            expected = figures[-1] if figures else None
    fields = {"kind": task.kind, "text": task.text, "expected": expected, "checker": checker}
    # Runs of one workspace share its files, read once (``files``: by workspace id).
    cache = files if files is not None else {}
    if workspace is not None and workspace.pk not in cache:
        cache[workspace.pk] = workspace_files(workspace)
    fields["files"] = cache[workspace.pk] if workspace is not None else []
    return fields | {"checker_options": {}, "source_run_id": run.pk, "private_to_id": private_to}


def reference_checker(expected_answer: str) -> tuple[str, object]:
    """The checker a task's expected answer asks for, read as the reference evaluator reads it
    (``reference.choose_mode``): ``/pattern/`` a regular expression, a lone number numeric, a
    list of labels labels, anything else contained."""
    from feedback.evaluation.reference import choose_mode, expected_labels

    from .checkers import numbers_in

    text = expected_answer.strip()
    mode = choose_mode(text)
    if mode == "regex":
        return "regex", text[1:-1]
    if mode == "numeric":
        return "numeric", numbers_in(text)[0]
    if mode == "labels":
        return "labels", expected_labels(text)
    return "contains", text


def item_reference(item: DatasetItem) -> str:
    """The item's expected value as a task's expected answer, as staff would give it (what the
    reference evaluator reads; ``reference_checker`` reads it back); "" where it has none."""
    expected = item.expected
    if item.checker == "numeric":
        value = float(expected)
        return str(int(value)) if value.is_integer() else f"{value:f}".rstrip("0")
    if item.checker == "regex":
        return f"/{expected}/"
    if item.checker in ("labels", "contains"):
        return ", ".join(map(str, expected)) if isinstance(expected, list) else str(expected)
    return ""


@transaction.atomic
def dataset_from_runs(*, runs, user, checker: str, dataset=None, name: str = "", note: str = ""):
    """A new version of ``dataset`` (or a new dataset ``name``): its latest items plus one item per
    run, the run's final answer as the expected value under ``checker``, the text files of the
    run's workspace as the item's files."""
    from feedback.models import Dataset

    if dataset is None:
        dataset = Dataset.objects.create(name=name, created_by=user)
    files: dict = {}
    items = [_item_from_run(run, checker=checker, files=files) for run in runs]
    return dataset_version_create(dataset=dataset, user=user, items=items, note=note, base=dataset.latest_version())


def dataset_from_evidence(*, strategy, user, name: str | None = None):
    """A dataset of ``strategy``'s evidence runs whose task has an expected answer (a failing
    run's own answer is no reference); ValueError when none has one."""
    runs = list(strategy.evidence.select_related("task__workspace").exclude(task__expected_answer="").order_by("pk"))
    if not runs:
        raise ValueError(_("None of its evidence runs has an expected answer to check against."))
    return dataset_from_runs(runs=runs, user=user, checker="contains", name=name or f"evidence-{strategy.pk}")
