"""Full-text search of task text on the embedded default: an FTS5 index kept by triggers (SQLite
only; PostgreSQL has its GIN index of migration 0005). Porter stemming, like PostgreSQL's
``english`` configuration, so "counting words" finds "count its words" on both."""

from django.db import migrations

FORWARD = [
    "CREATE VIRTUAL TABLE feedback_task_fts USING fts5("
    "text, content='feedback_task', content_rowid='id', tokenize='porter unicode61 remove_diacritics 2')",
    "INSERT INTO feedback_task_fts(rowid, text) SELECT id, text FROM feedback_task",
    "CREATE TRIGGER feedback_task_fts_insert AFTER INSERT ON feedback_task BEGIN "
    "INSERT INTO feedback_task_fts(rowid, text) VALUES (new.id, new.text); END",
    "CREATE TRIGGER feedback_task_fts_delete AFTER DELETE ON feedback_task BEGIN "
    "INSERT INTO feedback_task_fts(feedback_task_fts, rowid, text) VALUES ('delete', old.id, old.text); END",
    "CREATE TRIGGER feedback_task_fts_update AFTER UPDATE OF text ON feedback_task BEGIN "
    "INSERT INTO feedback_task_fts(feedback_task_fts, rowid, text) VALUES ('delete', old.id, old.text); "
    "INSERT INTO feedback_task_fts(rowid, text) VALUES (new.id, new.text); END",
]
BACKWARD = [
    "DROP TRIGGER IF EXISTS feedback_task_fts_update",
    "DROP TRIGGER IF EXISTS feedback_task_fts_delete",
    "DROP TRIGGER IF EXISTS feedback_task_fts_insert",
    "DROP TABLE IF EXISTS feedback_task_fts",
]


def _run(statements):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "sqlite":
            for statement in statements:
                schema_editor.execute(statement)

    return run


class Migration(migrations.Migration):
    dependencies = [("feedback", "0033_confirmation_withdrawn")]

    operations = [migrations.RunPython(_run(FORWARD), _run(BACKWARD), elidable=False)]
