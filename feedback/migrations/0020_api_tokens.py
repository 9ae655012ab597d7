"""API tokens (feedback/api/): per person, stored as their SHA-256 only."""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("feedback", "0019_mcp_servers"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="ApiToken",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("name", models.CharField(max_length=100, verbose_name="name")),
                (
                    "scope",
                    models.CharField(
                        choices=[("read", "Read only"), ("write", "Read and write")],
                        default="read",
                        max_length=8,
                        verbose_name="scope",
                    ),
                ),
                ("prefix", models.CharField(editable=False, max_length=16)),
                ("hashed", models.CharField(editable=False, max_length=64, unique=True)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now, editable=False)),
                ("last_used_at", models.DateTimeField(blank=True, editable=False, null=True, verbose_name="last used")),
                ("expires_at", models.DateTimeField(blank=True, null=True, verbose_name="expires")),
                ("revoked_at", models.DateTimeField(blank=True, null=True, verbose_name="revoked")),
                (
                    "user",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="api_tokens",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "verbose_name": "API token",
                "verbose_name_plural": "API tokens",
                "ordering": ["-created_at", "-id"],
                "indexes": [models.Index(fields=["user", "-created_at"], name="apitoken_user_recent")],
            },
        ),
    ]
