"""Rollups added to as runs end, instead of recounted (feedback/rollups.py).

- ``Run.counted_at``: when the run's figures went into the rollups. The runs that have ended are
  in them already (the old recounts counted every run), so they are marked counted.
- The latency histograms become rows (DailyToolLatency: day, kind, tool, bucket, calls), which
  the database adds up per tool and bucket, instead of a JSON object per DailyToolStats row that
  had to be unpacked row by row; the histograms already there are moved over.
- An index for the run list sorted by score, unscored runs last.
"""

import django.db.models.functions.comparison
from django.db import migrations, models
from django.db.models import F
from django.db.models.functions import Coalesce, Now

ENDED = ["succeeded", "failed", "cancelled"]


def histograms_to_rows(apps, schema_editor) -> None:
    stats = apps.get_model("feedback", "DailyToolStats")
    latency = apps.get_model("feedback", "DailyToolLatency")
    rows = []
    for day, kind, tool, histogram in stats.objects.values_list("day", "task_kind", "tool_name", "latency").iterator():
        rows += [
            latency(day=day, task_kind=kind, tool_name=tool, bucket=int(bucket), calls=calls)
            for bucket, calls in (histogram or {}).items()
            if calls
        ]
        if len(rows) >= 5000:
            latency.objects.bulk_create(rows)
            rows = []
    latency.objects.bulk_create(rows)


def rows_to_histograms(apps, schema_editor) -> None:
    stats = apps.get_model("feedback", "DailyToolStats")
    latency = apps.get_model("feedback", "DailyToolLatency")
    found: dict[tuple, dict] = {}
    for day, kind, tool, bucket, calls in latency.objects.values_list("day", "task_kind", "tool_name", "bucket", "calls"):
        found.setdefault((day, kind, tool), {})[str(bucket)] = calls
    for (day, kind, tool), histogram in found.items():
        stats.objects.filter(day=day, task_kind=kind, tool_name=tool).update(latency=histogram)


def mark_ended_runs_counted(apps, schema_editor) -> None:
    run = apps.get_model("feedback", "Run")
    run.objects.filter(status__in=ENDED).update(counted_at=Coalesce(F("finished_at"), Now()))


class Migration(migrations.Migration):

    dependencies = [
        ('feedback', '0015_accounts'),
    ]

    operations = [
        migrations.CreateModel(
            name='DailyToolLatency',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('day', models.DateField()),
                ('task_kind', models.CharField(choices=[('file_analysis', 'File analysis'), ('arithmetic', 'Arithmetic'), ('email_triage', 'Support-email triage'), ('general', 'General')], max_length=32)),
                ('tool_name', models.CharField(max_length=100)),
                ('bucket', models.PositiveSmallIntegerField()),
                ('calls', models.PositiveIntegerField(default=0)),
            ],
        ),
        migrations.AddField(
            model_name='run',
            name='counted_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddIndex(
            model_name='run',
            index=models.Index(models.OrderBy(django.db.models.functions.comparison.Coalesce('score', models.Value(-1.0)), descending=True), models.OrderBy(models.F('id'), descending=True), name='run_score_sort'),
        ),
        migrations.AddConstraint(
            model_name='dailytoollatency',
            constraint=models.UniqueConstraint(fields=('day', 'task_kind', 'tool_name', 'bucket'), name='daily_tool_latency_unique'),
        ),
        migrations.RunPython(histograms_to_rows, rows_to_histograms),
        migrations.RemoveField(
            model_name='dailytoolstats',
            name='latency',
        ),
        migrations.RunPython(mark_ended_runs_counted, migrations.RunPython.noop),
        migrations.AddIndex(
            model_name='run',
            index=models.Index(condition=models.Q(('counted_at__isnull', True)), fields=['created_at'], name='run_uncounted'),
        ),
    ]
