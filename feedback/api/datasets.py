"""Datasets: list them, read one version's items, import one (JSONL or CSV, as the import page:
all or nothing, every bad line named). For those who read every run, as on the pages."""

from datetime import datetime
from typing import Any, Literal

from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from ninja import Query, Router, Schema, Status
from pydantic import Field

from feedback.datasets.imports import MAX_IMPORT_BYTES, ImportRefused, dataset_import
from feedback.models import Dataset, DatasetItem
from feedback.selectors.datasets import dataset_list, version_items

from .auth import require_perm, require_write, user_of
from .errors import ApiError, invalid, refusals
from .outputs import Out, UserName
from .schemas import NO_NUL, NOT_BLANK, Body, Text, states

router = Router(tags=["datasets"])


class DatasetOut(Out):
    id: int
    name: str
    description: str
    created_by: UserName
    created_at: datetime
    latest_version: int | None = Field(validation_alias="latest_number")
    items: int = Field(validation_alias="latest_items", description="Items of the latest version")


class DatasetListOut(Out):
    data: list[DatasetOut]


class ItemOut(Out):
    position: int
    kind: str
    text: str
    expected: Any
    checker: Literal[tuple(DatasetItem.Checker.values)]  # type: ignore[valid-type]
    checker_options: dict
    split: Literal[tuple(DatasetItem.Split.values)]  # type: ignore[valid-type]
    files: list[str] = Field(description="The items' file names")
    source_run_id: int | None
    private_to: UserName


class DatasetVersionOut(Out):
    dataset_id: int
    name: str
    version: int
    items: list[ItemOut]


class VersionQuery(Schema):
    version: int | None = Field(None, ge=1, description="A version's number; the latest when left out")


class DatasetImportIn(Body):
    name: Text = Field(min_length=1, max_length=100, **states(pattern=NOT_BLANK))
    format: Literal["jsonl", "csv"]
    content: Text = Field(
        min_length=1, max_length=MAX_IMPORT_BYTES, description="The file's text (UTF-8)", **states(pattern=NO_NUL)
    )


_ITEM_FIELDS = (
    "position",
    "kind",
    "text",
    "expected",
    "checker",
    "checker_options",
    "split",
    "source_run_id",
    "private_to",
)


def _version_out(version) -> dict:
    items = [
        {
            **{f: getattr(i, f) for f in _ITEM_FIELDS},
            "files": [f.get("name", "") for f in i.files if isinstance(f, dict)],
        }
        for i in version_items(version)
    ]
    return {"dataset_id": version.dataset_id, "name": version.dataset.name, "version": version.number, "items": items}


@router.get("/datasets", response={200: DatasetListOut, **refusals()}, summary="List datasets")
def list_datasets(request: HttpRequest) -> dict:
    require_perm(user_of(request), "feedback.view_dataset")
    return {"data": list(dataset_list())}


@router.get("/datasets/{dataset_id}", response={200: DatasetVersionOut, **refusals(400, 404)}, summary="Read a dataset")
def read_dataset(request: HttpRequest, dataset_id: int, query: Query[VersionQuery]) -> dict:
    """A version's items (the latest, or ``version``)."""
    require_perm(user_of(request), "feedback.view_dataset")
    dataset = get_object_or_404(Dataset, pk=dataset_id)
    versions = dataset.versions.select_related("dataset")
    version = versions.filter(number=query.version).first() if query.version else versions.order_by("-number").first()
    if version is None:
        raise ApiError(404, "No such version.")
    return _version_out(version)


@router.post("/datasets", response={201: DatasetVersionOut, **refusals(400)}, summary="Import a dataset")
def import_dataset(request: HttpRequest, payload: DatasetImportIn) -> Status:
    """A new dataset, or a new version of the one ``name`` names, holding the items of ``content``
    (JSONL: one JSON object a line; CSV: a header row): all or nothing, a 400 naming each bad line."""
    user = require_write(request)
    require_perm(user, "feedback.add_dataset")
    if not payload.name.strip() or "\x00" in payload.name + payload.content:
        raise invalid({"name": ["A name, without NUL characters."]})
    try:
        version = dataset_import(name=payload.name.strip(), user=user, content=payload.content, fmt=payload.format)
    except ImportRefused as refused:
        raise invalid({"content": [f"line {n}: {why}" if n else str(why) for n, why in refused.errors]}) from refused
    return Status(201, _version_out(version))
