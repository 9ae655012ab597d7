"""The datasets pages' reads."""

from django.db.models import Count, Max, OuterRef, QuerySet, Subquery

from feedback.models import Dataset, DatasetItem, DatasetVersion


def dataset_list() -> QuerySet[Dataset]:
    """Every dataset with its latest version's number and item count."""
    latest = DatasetVersion.objects.filter(dataset=OuterRef("pk")).order_by("-number")
    return Dataset.objects.annotate(
        latest_number=Max("versions__number"),
        latest_items=Subquery(latest.annotate(n=Count("items")).values("n")[:1]),
    ).select_related("created_by")


def version_items(version: DatasetVersion) -> QuerySet[DatasetItem]:
    return version.items.select_related("source_run", "private_to").order_by("position")
