"""System checks of the settings, registered when the app is ready (FeedbackConfig.ready), so
``manage.py check`` and every command that runs the checks (``migrate``, ``runserver``) see them.

A check registered later, from a module imported only by the URLs (the API's, until now), joins
the registry after the checks have been listed and never runs: ``API_RATE_LIMIT=lots`` passed
``manage.py check`` and then made every API request a 500."""

from django.conf import settings
from django.core import checks


@checks.register()
def environment_check(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """One error per environment variable the settings could not take (agentsite/environment.py)."""
    return [checks.Error(problem, id="feedback.E001") for problem in settings.ENVIRONMENT_PROBLEMS]
