"""The email triage profile's default rule no longer demands the word "urgent" in every answer
(an inbox with no urgent email is rightly answered "None are urgent"), and its reference knows
urgency's opposites. A stored profile still holding the old default exactly was never edited:
it gets the new one; an edited profile is left as its reviewer made it."""

from django.db import migrations

OLD = [
    {"evaluator": "rule", "weight": 0.3, "config": {"keywords": ["urgent"], "min_length": 20}},
    {"evaluator": "reference", "weight": 0.4, "config": {"mode": "auto"}},
    {"evaluator": "judge", "weight": 0.3, "config": {}},
]
# As feedback.evaluation.profiles.DEFAULT_PROFILES["email_triage"] was written with this migration
# (a migration keeps its own copy: the module may change later).
NEW = [
    {"evaluator": "rule", "weight": 0.3,
     "config": {"any_keywords": ["mail", "message", "inbox", "ticket", "urgent", "urgency", "priority"]}},
    {"evaluator": "reference", "weight": 0.4, "config": {"mode": "auto", "contradictions": {
        "urgent": ["not urgent", "non-urgent", "low priority", "not a priority", "no rush", "can wait"]}}},
    {"evaluator": "judge", "weight": 0.3, "config": {}},
]  # fmt: skip


def _replace(apps, old, new):
    EvaluationProfile = apps.get_model("feedback", "EvaluationProfile")
    for profile in EvaluationProfile.objects.filter(task_kind="email_triage"):
        if profile.evaluators == old:
            profile.evaluators = new
            profile.save(update_fields=["evaluators", "updated_at"])


def forwards(apps, schema_editor):
    _replace(apps, OLD, NEW)


def backwards(apps, schema_editor):
    _replace(apps, NEW, OLD)


class Migration(migrations.Migration):
    dependencies = [
        ("feedback", "0021_strategy_version_title_malformed_reply"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
