"""A GIN index for the run list's full-text search over task text (PostgreSQL only).

Built from the same SearchVector expression feedback.selectors.search_runs queries with, so
PostgreSQL can use it. SQLite has no GIN indexes: there the search is an icontains and this
migration does nothing. The index is not declared on the model because it only exists on one
database engine.
"""

from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVector
from django.db import migrations

INDEX = "task_text_search"


def _index() -> GinIndex:
    return GinIndex(SearchVector("text", config="english"), name=INDEX)


def create(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.add_index(apps.get_model("feedback", "Task"), _index())


def drop(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.remove_index(apps.get_model("feedback", "Task"), _index())


class Migration(migrations.Migration):
    dependencies = [("feedback", "0004_strategy_evidence_summary")]

    operations = [migrations.RunPython(create, drop)]
