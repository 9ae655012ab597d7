"""The mining job's schedule lives in django-celery-beat's tables: reviewers change it from the
strategies page (or staff in the admin) and beat picks it up without a restart."""

from django.db import transaction
from django_celery_beat.models import IntervalSchedule, PeriodicTask

TASK = "feedback.tasks.strategies_mine_task"
NAME = "mine-failures"
DEFAULT_MINUTES = 60


def mining_every_minutes() -> int:
    task = PeriodicTask.objects.filter(task=TASK, interval__isnull=False).select_related("interval").first()
    if task is None:
        return DEFAULT_MINUTES
    interval = task.interval
    seconds = interval.every * {"days": 86400, "hours": 3600, "minutes": 60, "seconds": 1}.get(interval.period, 60)
    return max(1, seconds // 60)


@transaction.atomic
def set_mining_every_minutes(minutes: int) -> None:
    interval, _ = IntervalSchedule.objects.get_or_create(every=minutes, period=IntervalSchedule.MINUTES)
    updated = PeriodicTask.objects.filter(task=TASK).update(interval=interval, crontab=None, enabled=True)
    if not updated:
        PeriodicTask.objects.create(name=NAME, task=TASK, interval=interval)
    _schedule_changed()


def _schedule_changed() -> None:
    # A bulk update sends no signal: tell beat its schedule changed.
    from django_celery_beat.models import PeriodicTasks

    PeriodicTasks.update_changed()
