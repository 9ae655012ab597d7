"""DailyToolStats: the per-tool daily rollups behind the metrics page's tool figures.

The rollups of the runs already recorded are counted here (the ``rebuild_daily_stats``
command, a no-op on an empty database): without them every window would show only the
calls of its live edges until someone ran the command.
"""

import io

from django.core.management import call_command
from django.db import migrations, models


def count_existing_runs(apps, schema_editor) -> None:
    call_command("rebuild_daily_stats", stdout=io.StringIO())


class Migration(migrations.Migration):
    dependencies = [("feedback", "0008_step_fk_indexes_covered_by_unique")]

    operations = [
        migrations.CreateModel(
            name="DailyToolStats",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("day", models.DateField()),
                (
                    "task_kind",
                    models.CharField(
                        choices=[
                            ("file_analysis", "File analysis"),
                            ("arithmetic", "Arithmetic"),
                            ("email_triage", "Support-email triage"),
                            ("general", "General"),
                        ],
                        max_length=32,
                    ),
                ),
                ("tool_name", models.CharField(max_length=100)),
                ("calls", models.PositiveIntegerField(default=0)),
                ("succeeded", models.PositiveIntegerField(default=0)),
                ("retries", models.PositiveIntegerField(default=0)),
                ("timed", models.PositiveIntegerField(default=0)),
                ("duration_sum", models.PositiveBigIntegerField(default=0)),
                ("latency", models.JSONField(default=dict)),
                ("refreshed_at", models.DateTimeField(auto_now=True)),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(fields=("day", "task_kind", "tool_name"), name="daily_tool_stats_unique")
                ],
            },
        ),
        migrations.RunPython(count_existing_runs, migrations.RunPython.noop, elidable=True),
    ]
