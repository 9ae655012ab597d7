"""Run.outcome (the task accomplished or not, apart from the process's status), each
evaluation's verdict on it, and the rollups' accomplished and judged counts.

Runs recorded before this have no verdicts to decide from: the ones that ended without an
answer (failed, cancelled) are not accomplished by the outcome rule itself (chain.py,
``run_outcome``, rule 2); the others stay unknown until they are evaluated again. The rollups of
the runs already recorded were recounted here; the metrics_closed_days migration empties the daily tables
for beat to rebuild them from the rows, so nothing is counted here any more (the command, run
against the models of today, would not find this migration's schema).
"""

from django.db import migrations, models


def outcome_of_runs_without_an_answer(apps, schema_editor) -> None:
    Run = apps.get_model("feedback", "Run")
    Run.objects.filter(status__in=["failed", "cancelled"]).update(outcome="not_accomplished")


def count_existing_runs(apps, schema_editor) -> None:
    """Counted by the rebuild that follows the metrics_closed_days migration."""


class Migration(migrations.Migration):
    dependencies = [("feedback", "0011_workspace_owner")]

    operations = [
        migrations.AddField(
            model_name="dailyrunstats",
            name="accomplished",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="dailyrunstats",
            name="judged",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="evaluation",
            name="accomplished",
            field=models.BooleanField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="run",
            name="outcome",
            field=models.CharField(
                choices=[
                    ("accomplished", "Accomplished"),
                    ("not_accomplished", "Not accomplished"),
                    ("unknown", "Unknown"),
                ],
                db_default="unknown",
                default="unknown",
                max_length=16,
            ),
        ),
        migrations.AlterField(
            model_name="run",
            name="status",
            field=models.CharField(
                choices=[
                    ("queued", "Queued"),
                    ("running", "Running"),
                    ("awaiting_confirmation", "Awaiting confirmation"),
                    ("succeeded", "Answered"),
                    ("failed", "Failed"),
                    ("cancelled", "Cancelled"),
                ],
                default="queued",
                max_length=32,
            ),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(fields=["outcome", "-created_at", "-id"], name="run_outcome_recent"),
        ),
        migrations.RunPython(outcome_of_runs_without_an_answer, migrations.RunPython.noop, elidable=True),
        migrations.RunPython(count_existing_runs, migrations.RunPython.noop, elidable=True),
    ]
