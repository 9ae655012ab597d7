from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _

from feedback import services
from feedback.agent.llm import describe_backend
from feedback.forms import TaskForm


@permission_required("feedback.add_task", raise_exception=True)
def task_submit(request: HttpRequest) -> HttpResponse:
    form = TaskForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        run = services.task_submit(user=request.user, **form.cleaned_data)
        messages.success(request, _("Task submitted: run #%(id)s is queued.") % {"id": run.pk})
        return redirect("feedback-run-detail", run_id=run.pk)
    status = 400 if form.errors else 200
    return render(request, "feedback/task_submit.html", {"form": form, "backend": describe_backend()}, status=status)
