from django.apps import AppConfig
from django.db.models.signals import post_migrate


class FeedbackConfig(AppConfig):
    name = "feedback"
    verbose_name = "Agent feedback loop"

    def ready(self) -> None:
        from feedback import checks, quota, roles, throttle  # noqa: F401 (checks: registered; quota, throttle: signals)
        from feedback.strategies import injection  # noqa: F401 (its signal receivers)

        post_migrate.connect(roles.ensure_groups, sender=self)
        post_migrate.connect(_ensure_tool_settings, sender=self)


def _ensure_tool_settings(**kwargs) -> None:
    """One ToolSetting row per built-in tool, so the admin lists every tool to switch off."""
    from feedback.agent.tools import BUILTIN_TOOLS
    from feedback.models import ToolSetting

    known = set(ToolSetting.objects.values_list("name", flat=True))
    ToolSetting.objects.bulk_create([ToolSetting(name=name) for name in BUILTIN_TOOLS if name not in known])
