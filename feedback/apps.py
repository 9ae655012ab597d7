from django.apps import AppConfig
from django.db.models.signals import post_migrate


class FeedbackConfig(AppConfig):
    name = "feedback"
    verbose_name = "Agent feedback loop"

    def ready(self) -> None:
        from feedback import roles

        post_migrate.connect(roles.ensure_groups, sender=self)
