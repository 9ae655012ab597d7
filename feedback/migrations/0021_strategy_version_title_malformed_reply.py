"""A strategy's title is versioned like the rest of its content (a reviewer edits it before
approving; old versions keep theirs); mining's fifth pattern kind, malformed or empty model replies."""

from django.db import migrations, models
from django.db.models import OuterRef, Subquery


def titles_from_strategies(apps, schema_editor):
    # The only title known for a version written before titles were versioned: its strategy's.
    Strategy = apps.get_model("feedback", "Strategy")
    StrategyVersion = apps.get_model("feedback", "StrategyVersion")
    StrategyVersion.objects.update(
        title=Subquery(Strategy.objects.filter(pk=OuterRef("strategy_id")).values("title")[:1])
    )


class Migration(migrations.Migration):
    dependencies = [
        ("feedback", "0020_api_tokens"),
    ]

    operations = [
        migrations.AddField(
            model_name="strategyversion",
            name="title",
            field=models.CharField(blank=True, max_length=200, verbose_name="title"),
        ),
        migrations.RunPython(titles_from_strategies, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="strategy",
            name="pattern_kind",
            field=models.CharField(
                choices=[
                    ("task_keywords", "Task kind and keywords"),
                    ("error_signature", "Error signature"),
                    ("tool_sequence", "Tool-call sequence"),
                    ("evaluator_feedback", "Evaluator feedback"),
                    ("malformed_reply", "Malformed or empty model reply"),
                    ("manual", "Written by a person"),
                ],
                max_length=32,
            ),
        ),
    ]
