"""The step write is the ORM's again (agent/recorder.py): one transaction that updates the run's
row under the lease, with its counters, and inserts the step and its attempts. The PL/pgSQL
function of migrations 0007 and 0010 repeated every column of both tables and had to be replaced
with every change of them; it is dropped."""

from django.db import migrations


def forwards(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(_previous().DROP)


def backwards(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(_previous().CREATE)


def _previous():
    from importlib import import_module

    return import_module("feedback.migrations.0010_step_write_without_run_update")


class Migration(migrations.Migration):
    dependencies = [("feedback", "0013_job_lock")]

    operations = [migrations.RunPython(forwards, backwards)]
