from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from feedback import comparison, selectors
from feedback.forms import RunCompareForm
from feedback.models import Run


def _run(request: HttpRequest, run_id: int) -> Run:
    run = get_object_or_404(Run.objects.select_related("task", "task__created_by"), pk=run_id)
    if not selectors.runs_visible_to(request.user).filter(pk=run.pk).exists():
        raise PermissionDenied
    return run


def run_compare(request: HttpRequest) -> HttpResponse:
    """Two runs side by side (``?a=&b=``); with only ``a``, the runs it can be compared with."""
    if not (request.user.has_perm("feedback.view_run") or request.user.has_perm("feedback.add_task")):
        raise PermissionDenied
    form = RunCompareForm(request.GET or None)
    if not form.is_valid():
        return render(request, "feedback/run_compare.html", {"form": form}, status=400 if form.is_bound else 200)
    left = _run(request, form.cleaned_data["a"])
    context = {"form": form, "left": left}
    if form.cleaned_data.get("b") is None:
        context["suggestions"] = comparison.suggestions(left, selectors.runs_visible_to(request.user))
        return render(request, "feedback/run_compare.html", context)
    right = _run(request, form.cleaned_data["b"])
    left_steps, right_steps = comparison.comparison_steps(left), comparison.comparison_steps(right)
    context.update(
        right=right,
        pairs=comparison.align_steps(left_steps, right_steps),
        evaluations=comparison.pair_evaluations(left, right),
        applied=(comparison.applied(left), comparison.applied(right)),
        cut=max(left.step_count, right.step_count) > comparison.MAX_STEPS,
        max_steps=comparison.MAX_STEPS,
    )
    return render(request, "feedback/run_compare.html", context)
