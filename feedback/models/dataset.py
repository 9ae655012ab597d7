"""Datasets: named, versioned sets of items (task, files, expected answer, checker) that paired
experiments run with and without a change. A version is immutable: a change makes a new version
copying the items, so an experiment's figures always refer to the items it ran."""

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from .task import Task

# An item's files are small text files: bounded so a dataset stays a database row, not a disk.
FILES_MAX_BYTES = 256 * 1024


class Dataset(models.Model):
    name = models.CharField(_("name"), max_length=100, unique=True)
    description = models.CharField(_("description"), max_length=500, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="datasets"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def latest_version(self) -> "DatasetVersion | None":
        return self.versions.order_by("-number").first()


class DatasetVersion(models.Model):
    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    note = models.CharField(_("note"), max_length=300, blank=True)

    class Meta:
        ordering = ["dataset", "number"]
        constraints = [models.UniqueConstraint(fields=["dataset", "number"], name="dataset_version_once")]

    def __str__(self) -> str:
        return f"{self.dataset} v{self.number}"


class DatasetItem(models.Model):
    class Checker(models.TextChoices):
        NUMERIC = "numeric", _("Numeric (with tolerance)")
        LABELS = "labels", _("Labels")
        CONTAINS = "contains", _("Contains")
        REGEX = "regex", _("Regular expression")
        JSON_SCHEMA = "json_schema", _("JSON Schema")

    class Split(models.TextChoices):
        MINING = "mining", _("Mining")
        HELD_OUT = "held_out", _("Held out")

    version = models.ForeignKey(DatasetVersion, on_delete=models.CASCADE, related_name="items")
    position = models.PositiveIntegerField()
    kind = models.CharField(_("kind"), max_length=32, choices=Task.Kind.choices, default=Task.Kind.GENERAL)
    text = models.TextField(_("task"), max_length=Task.TEXT_MAX_LENGTH)
    # [{"name": "docs/report.txt", "content": "..."}]: relative paths of plain names, text content,
    # bounded in all.
    files = models.JSONField(default=list, blank=True)
    expected = models.JSONField(_("expected"), null=True, blank=True)
    checker = models.CharField(_("checker"), max_length=16, choices=Checker.choices)
    checker_options = models.JSONField(default=dict, blank=True)
    split = models.CharField(_("split"), max_length=16, choices=Split.choices, default=Split.MINING)
    source_run = models.ForeignKey(
        "feedback.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="dataset_items"
    )
    # Made from a private upload or workspace: usable only by its owner and those who read every
    # run (the rule of Workspace.owner). CASCADE as there: a deleted person's files stay private.
    private_to = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )

    class Meta:
        ordering = ["version", "position"]
        constraints = [models.UniqueConstraint(fields=["version", "position"], name="dataset_item_position_once")]

    def __str__(self) -> str:
        return f"{self.version} #{self.position}"

    def clean(self) -> None:
        from feedback.datasets.checkers import options_problems

        problems = files_problems(self.files) + options_problems(self.checker, self.expected, self.checker_options)
        if problems:
            raise ValidationError(problems)


def files_problems(files: object) -> list[str]:
    if not isinstance(files, list):
        return [str(_("files must be a list of {name, content}."))]
    problems, total = [], 0
    for entry in files:
        if (
            not isinstance(entry, dict)
            or not isinstance(entry.get("name"), str)
            or not isinstance(entry.get("content"), str)
        ):
            problems.append(str(_("Each file needs a name and a text content.")))
            continue
        name = entry["name"]
        # A path inside the item's workspace ("docs/notes.md"): plain names, no hidden part.
        parts = name.split("/")
        if "\\" in name or any(not part or part.startswith(".") for part in parts) or len(parts) > 5:
            problems.append(str(_("%(name)r is not a plain file path (like docs/notes.md).") % {"name": name}))
        total += len(entry["content"].encode())
    if total > FILES_MAX_BYTES:
        problems.append(str(_("The files take more than %(n)s bytes.") % {"n": FILES_MAX_BYTES}))
    return problems
