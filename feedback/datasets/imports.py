"""Importing a dataset from JSONL or CSV: every line checked first, a clear error per bad line,
nothing saved from a file with any bad line (all or nothing)."""

import csv
import io
import json

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils.translation import gettext as _

from feedback.models import Dataset, DatasetItem, DatasetVersion, Task
from feedback.models.dataset import files_problems

from .checkers import options_problems
from .services import dataset_version_create

MAX_IMPORT_BYTES = 2 * 1024 * 1024
MAX_ITEMS = 5000


class ImportRefused(ValueError):
    """The file cannot be imported; ``errors`` lists (line, message), nothing was saved."""

    def __init__(self, errors: list[tuple[int, str]]) -> None:
        self.errors = errors
        super().__init__("; ".join(_("line %(n)s: %(m)s") % {"n": n, "m": m} for n, m in errors[:20]))


def _rows(content: str, fmt: str) -> list[tuple[int, object]]:
    if fmt == "jsonl":
        rows = []
        for n, line in enumerate(content.splitlines(), start=1):
            if line.strip():
                try:
                    rows.append((n, json.loads(line)))
                except ValueError as exc:
                    rows.append((n, _("not JSON (%(e)s)") % {"e": exc.msg}))
        return rows
    reader = csv.DictReader(io.StringIO(content))
    rows = []
    for record in reader:
        row = dict(record)
        for key in ("expected", "checker_options", "files"):
            if row.get(key):
                try:
                    row[key] = json.loads(row[key])
                except ValueError:
                    if key != "expected":
                        row[key] = _("%(key)s is not JSON") % {"key": key}
        rows.append((reader.line_num, row))
    return rows


def _item(row: object) -> tuple[dict | None, str]:
    if isinstance(row, str):
        return None, row
    if not isinstance(row, dict):
        return None, _("a line must be an object")
    text = row.get("text")
    if not isinstance(text, str) or not text.strip() or len(text) > Task.TEXT_MAX_LENGTH:
        return None, _("text is missing or too long")
    kind = row.get("kind") or Task.Kind.GENERAL
    if kind not in Task.Kind.values:
        return None, _("unknown kind %(kind)r") % {"kind": kind}
    split = row.get("split") or DatasetItem.Split.MINING
    if split not in DatasetItem.Split.values:
        return None, _("unknown split %(split)r") % {"split": split}
    checker, expected = row.get("checker") or "", row.get("expected")
    options, files = row.get("checker_options") or {}, row.get("files") or []
    for value in (options, files):
        if isinstance(value, str):
            return None, value
    problems = options_problems(checker, expected, options) + files_problems(files)
    if problems:
        return None, str(problems[0])
    fields = {"kind": kind, "text": text, "expected": expected, "checker": checker}
    return fields | {"checker_options": options, "files": files, "split": split}, ""


def parse(content: str, fmt: str) -> list[dict]:
    """The items of ``content`` (fmt "jsonl" or "csv"); ImportRefused naming every bad line."""
    if len(content.encode()) > MAX_IMPORT_BYTES:
        raise ImportRefused([(0, _("the file is larger than %(n)s bytes") % {"n": MAX_IMPORT_BYTES})])
    items, errors = [], []
    for n, row in _rows(content, fmt):
        item, why = _item(row)
        if item is None:
            errors.append((n, why))
        else:
            items.append(item)
    if not items and not errors:
        errors.append((0, _("the file holds no items")))
    if len(items) > MAX_ITEMS:
        errors.append((0, _("more than %(n)s items") % {"n": MAX_ITEMS}))
    if errors:
        raise ImportRefused(errors)
    return items


@transaction.atomic
def dataset_import(*, name: str, user, content: str, fmt: str, description: str = "") -> DatasetVersion:
    """A new version of the dataset ``name`` (made if new) holding the file's items, or nothing."""
    items = parse(content, fmt)
    dataset, _created = Dataset.objects.get_or_create(
        name=name, defaults={"description": description, "created_by": user}
    )
    try:
        return dataset_version_create(dataset=dataset, user=user, items=items, note=_("Imported"))
    except ValidationError as exc:
        raise ImportRefused([(0, "; ".join(exc.messages))]) from exc
