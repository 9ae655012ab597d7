from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from feedback import selectors, services
from feedback.models import Run, Task

RUNS_PER_PAGE = 50


def evaluation_context(request: HttpRequest, run: Run) -> dict:
    # Imported late: the evaluation views import this module for _visible_run.
    from .evaluation import evaluation_context

    return evaluation_context(request, run)


def _visible_run(request: HttpRequest, run_id: int) -> Run:
    run = get_object_or_404(Run.objects.select_related("task", "task__created_by", "parent"), pk=run_id)
    if not selectors.runs_visible_to(request.user).filter(pk=run.pk).exists():
        raise PermissionDenied
    return run


def run_list(request: HttpRequest) -> HttpResponse:
    if not (request.user.has_perm("feedback.view_run") or request.user.has_perm("feedback.add_task")):
        raise PermissionDenied
    status = request.GET.get("status", "")
    kind = request.GET.get("kind", "")
    status = status if status in Run.Status.values else ""
    kind = kind if kind in Task.Kind.values else ""
    page = Paginator(selectors.run_list(request.user, status=status, kind=kind), RUNS_PER_PAGE).get_page(
        request.GET.get("page")
    )
    template = "feedback/run_list.html"
    if request.htmx:
        template += "#run-table"
    context = {
        "page": page,
        "status": status,
        "kind": kind,
        "statuses": Run.Status.choices,
        "kinds": Task.Kind.choices,
        "any_active": any(r.is_active for r in page),
    }
    return render(request, template, context)


def run_detail(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _visible_run(request, run_id)
    template = "feedback/run_detail.html"
    if request.htmx:
        # The evaluation section polls on its own: it may still be waiting after the run ended.
        template += "#run-evaluations" if request.GET.get("part") == "evaluations" else "#run-live"
    context = {
        "run": run,
        "steps": selectors.run_steps(run),
        "children": run.children.select_related("task").order_by("id"),
        "confirmations": run.confirmations.select_related("decided_by").order_by("requested_at"),
        "can_control": services.run_can_control(run=run, user=request.user),
        **evaluation_context(request, run),
    }
    return render(request, template, context)


@require_POST
def run_cancel(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _visible_run(request, run_id)
    if services.run_cancel(run=run, user=request.user):
        messages.success(request, _("Run #%(id)s will stop.") % {"id": run.pk})
    else:
        messages.info(request, _("Run #%(id)s had already ended.") % {"id": run.pk})
    return redirect("feedback-run-detail", run_id=run.pk)


@require_POST
def run_rerun(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _visible_run(request, run_id)
    if not request.user.has_perm("feedback.add_task"):
        raise PermissionDenied
    new_run = services.run_rerun(run=run, user=request.user)
    messages.success(request, _("Run #%(id)s is queued.") % {"id": new_run.pk})
    return redirect("feedback-run-detail", run_id=new_run.pk)
