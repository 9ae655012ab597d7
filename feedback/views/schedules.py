"""Recurring tasks: the beat entries people set in the task form, listed and switched off here."""

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST
from django_celery_beat.models import PeriodicTask

from feedback import services
from feedback.models import Task


def _can_see(user) -> bool:
    return user.has_perm("feedback.add_task") or user.has_perm("feedback.view_run")


def _task_of(schedule: PeriodicTask) -> Task | None:
    task_id = schedule.name.removeprefix(services.SCHEDULE_PREFIX)
    return Task.objects.filter(pk=int(task_id)).select_related("created_by").first() if task_id.isdigit() else None


def schedule_list(request: HttpRequest) -> HttpResponse:
    if not _can_see(request.user):
        raise PermissionDenied
    schedules = list(
        PeriodicTask.objects.filter(task=services.SCHEDULE_TASK)
        .select_related("interval", "crontab")
        .order_by("-date_changed")
    )
    ids = [int(s.name.removeprefix(services.SCHEDULE_PREFIX)) for s in schedules]
    tasks = Task.objects.select_related("created_by").in_bulk(ids)
    rows = []
    for schedule in schedules:
        task = tasks.get(int(schedule.name.removeprefix(services.SCHEDULE_PREFIX)))
        # Staff see the schedules of their own tasks; operators and reviewers see them all.
        if request.user.has_perm("feedback.view_run") or (task and task.created_by_id == request.user.pk):
            can_control = services.schedule_can_control(task=task, user=request.user)
            rows.append({"schedule": schedule, "task": task, "can_control": can_control})
    return render(request, "feedback/schedule_list.html", {"rows": rows})


@require_POST
def schedule_toggle(request: HttpRequest, schedule_id: int) -> HttpResponse:
    schedule = get_object_or_404(PeriodicTask, pk=schedule_id, task=services.SCHEDULE_TASK)
    enable = not schedule.enabled
    services.schedule_set_enabled(schedule=schedule, task=_task_of(schedule), user=request.user, enabled=enable)
    if enable:
        messages.success(request, _("The schedule is on again."))
    else:
        messages.success(request, _("The schedule is off: no new runs until you turn it on."))
    return redirect("feedback-schedule-list")
