from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _

from feedback import quota, services
from feedback.agent.llm import describe_backend
from feedback.forms import UPLOAD_MAX_BYTES, UPLOAD_MAX_FILES, TaskForm, kind_help
from feedback.models import Task
from feedback.uploads import accepts_uploads


@accepts_uploads(files=UPLOAD_MAX_FILES, file_bytes=UPLOAD_MAX_BYTES)
@permission_required("feedback.add_task", raise_exception=True)
def task_submit(request: HttpRequest) -> HttpResponse:
    template = "feedback/task_submit.html"
    if request.htmx and request.method == "GET" and "kind" in request.GET:
        # The kind changed: only its help and example are swapped, what was typed stays.
        return render(request, template + "#kind-help", _kind_context(request.GET["kind"]))
    form = TaskForm(request.POST or None, request.FILES or None, user=request.user)
    if request.method == "POST" and form.is_valid():
        try:
            return _submitted(request, form.cleaned_data)
        except quota.QuotaExceeded as refused:
            form.add_error(None, str(refused))  # another submission of theirs took the room first
    status = 400 if form.errors else 200
    if form.errors:
        messages.error(request, _("The task was not submitted: please correct the fields marked below."))
    kind = form["kind"].value() or Task.Kind.GENERAL
    context = {"form": form, "backend": describe_backend(), **_kind_context(kind)}
    context["usage"] = quota.usage_of(request.user)  # what their files take of their disk quota
    return render(request, template, context, status=status)


def _submitted(request: HttpRequest, data: dict) -> HttpResponse:
    run = services.task_submit(
        user=request.user,
        text=data["text"],
        kind=data["kind"],
        expected_answer=data["expected_answer"],
        workspace=data["workspace"],
        files=data["files"],
    )
    messages.success(request, _("Task submitted: run #%(id)s is queued.") % {"id": run.pk})
    if data["files"]:
        messages.info(request, _("%(n)s file(s) added to the run's workspace.") % {"n": len(data["files"])})
    if data["repeat"]:
        services.task_schedule(task=run.task, repeat=data["repeat"], every=data["every"], cron=data["cron"])
        messages.success(request, _("The task will also run on its schedule (see Recurring tasks)."))
    return redirect("feedback-run-detail", run_id=run.pk)


def _kind_context(kind: str) -> dict:
    help_text, example = kind_help(kind)
    return {"kind_help": help_text, "kind_example": example}
