import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

# The names services.workspace_with_uploads gives the workspaces it makes.
UPLOAD_NAME = r"^upload-[0-9a-f]{16}$"


def uploads_to_their_authors(apps, schema_editor):
    """Workspaces made from uploads before they had an owner belong to the author of the task
    they were made for (the first one: later tasks may have picked them when anyone could). One
    whose author is gone goes too, as it would now with its owner: left shared, it would offer
    that person's files to everyone."""
    if schema_editor.connection.vendor == "postgresql":
        # Foreign keys checked at each statement: checks left pending until the commit would make
        # PostgreSQL refuse the owner index, which this migration creates after this function.
        schema_editor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    Workspace = apps.get_model("feedback", "Workspace")
    Task = apps.get_model("feedback", "Task")
    for workspace in Workspace.objects.filter(owner=None, name__regex=UPLOAD_NAME):
        first = Task.objects.filter(workspace=workspace).order_by("created_at", "pk").first()
        if first is not None and first.created_by_id is not None:
            Workspace.objects.filter(pk=workspace.pk).update(owner_id=first.created_by_id)
        else:
            workspace.delete()


class Migration(migrations.Migration):
    dependencies = [
        ("feedback", "0010_step_write_without_run_update"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="workspace",
            name="owner",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="workspaces",
                to=settings.AUTH_USER_MODEL,
                verbose_name="owner",
            ),
        ),
        migrations.RunPython(uploads_to_their_authors, migrations.RunPython.noop),
    ]
