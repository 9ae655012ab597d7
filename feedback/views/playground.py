"""The playground of one run: edit its system prompt or a strategy's guidance, re-run it, and
compare each re-run with the original. Its list of re-runs polls itself while one is live."""

from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django_htmx.http import HttpResponseStopPolling

from feedback import selectors
from feedback.forms import PlaygroundForm
from feedback.models import Run, Strategy
from feedback.playground import playground_rerun, playground_runs

TEMPLATE = "feedback/playground.html"


def _original(request: HttpRequest, run_id: int) -> Run:
    run = get_object_or_404(Run.objects.select_related("task"), pk=run_id)
    if not selectors.runs_visible_to(request.user).filter(pk=run.pk).exists():
        raise PermissionDenied
    return run


def _initial(request: HttpRequest, run: Run) -> dict:
    initial = {"system_prompt": run.system_prompt}
    wanted = request.GET.get("strategy", "")
    strategy = (
        Strategy.objects.filter(pk=int(wanted)).select_related("current_version").first() if wanted.isdigit() else None
    )
    if strategy is not None and strategy.current_version is not None:
        initial |= {"strategy": strategy.pk, "guidance": strategy.current_version.new_guidance}
    return initial


def _page(request: HttpRequest, run: Run, form: PlaygroundForm, status: int = 200) -> HttpResponse:
    reruns = playground_runs(run)
    context = {"run": run, "form": form, "reruns": reruns, "live": any(p.run.is_active for p in reruns)}
    if request.htmx:
        response = render(request, TEMPLATE + "#playground-reruns", context)
        if not context["live"]:
            response.status_code = HttpResponseStopPolling.status_code
        return response
    return render(request, TEMPLATE, context, status=status)


@permission_required("feedback.add_playgroundrun", raise_exception=True)
def playground(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _original(request, run_id)
    if request.method != "POST":
        return _page(request, run, PlaygroundForm(initial=_initial(request, run)))
    form = PlaygroundForm(request.POST)
    if not form.is_valid():
        return _page(request, run, form, status=400)
    data = form.cleaned_data
    # The prompt as it was is no edit: the re-run builds it as production would now.
    prompt = data["system_prompt"] if data["system_prompt"].strip() != run.system_prompt.strip() else ""
    guidance = data["guidance"]
    strategy = data.get("strategy")
    if strategy is not None and not guidance.strip():
        guidance = strategy.current_version.new_guidance  # the strategy as it is, tried on this run
    try:
        rerun = playground_rerun(
            original=run, user=request.user, system_prompt=prompt, guidance=guidance, strategy=strategy,
            note=data.get("note", ""),
        )  # fmt: skip
    except ValidationError as refused:
        for message in refused.messages:
            form.add_error(None, message)
        return _page(request, run, form, status=400)
    messages.success(request, _("Run #%(id)s re-runs it with your edit.") % {"id": rerun.run_id})
    return redirect("feedback-run-playground", run_id=run.pk)
