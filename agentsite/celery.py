import os

from celery import Celery, signals

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")

app = Celery("agentsite")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@signals.worker_init.connect
@signals.beat_init.connect
def refuse_bad_environment(**kwargs) -> None:
    """A worker or beat runs no system check: a variable the settings could not take stops it.
    SystemExit, because Celery logs any Exception a signal receiver raises and carries on."""
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured

    from agentsite.environment import refuse_to_start

    try:
        refuse_to_start(settings.ENVIRONMENT_PROBLEMS)
    except ImproperlyConfigured as refused:
        raise SystemExit(str(refused)) from None
