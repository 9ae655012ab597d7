"""DailyToolStats: the per-tool daily rollups behind the metrics page's tool figures.

The rollups of the runs already recorded used to be counted here; they are counted by the
latest migration that changes what the rollups hold (0012_run_outcome), because the count runs
today's code, which reads columns this migration's database does not have yet.
"""

from django.db import migrations, models


def count_existing_runs(apps, schema_editor) -> None:
    """Moved to 0012_run_outcome (see the module's docstring)."""


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
