"""Paired experiments: the list with the form that starts one, an experiment's page (its part
polls while it runs), and stopping one."""

from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST
from django_htmx.http import HttpResponseStopPolling

from feedback.experiments.services import experiment_start, experiment_stop
from feedback.forms import ExperimentForm
from feedback.models import Experiment
from feedback.selectors.experiments import experiment_figures, experiment_list, experiment_pairs

DETAIL = "feedback/experiment_detail.html"


def _list(request: HttpRequest, form: ExperimentForm, status: int = 200) -> HttpResponse:
    context = {
        "experiments": experiment_list()[:100],
        "form": form,
        "can_start": request.user.has_perm("feedback.add_experiment"),
    }
    return render(request, "feedback/experiment_list.html", context, status=status)


@permission_required("feedback.view_experiment", raise_exception=True)
def experiments(request: HttpRequest) -> HttpResponse:
    return _list(request, ExperimentForm(initial=request.GET.dict()))


@require_POST
@permission_required("feedback.add_experiment", raise_exception=True)
def experiment_start_view(request: HttpRequest) -> HttpResponse:
    form = ExperimentForm(request.POST)
    if not form.is_valid():
        return _list(request, form, status=400)
    data = form.cleaned_data
    try:
        experiment = experiment_start(
            user=request.user,
            dataset_version=data["dataset_version"],
            change_kind=data["change_kind"],
            strategy=data.get("strategy"),
            change=form.change(),
            split=data.get("split") or "",
            repeats=data["repeats"],
        )
    except (ValidationError, PermissionDenied) as refused:
        # Nothing started; the form keeps what was typed.
        why = refused.messages if isinstance(refused, ValidationError) else [str(refused) or _("Not allowed.")]
        for message in why:
            form.add_error(None, message)
        return _list(request, form, status=403 if isinstance(refused, PermissionDenied) else 400)
    messages.success(request, _("Experiment #%(id)s started.") % {"id": experiment.pk})
    return redirect("feedback-experiment-detail", experiment_id=experiment.pk)


@permission_required("feedback.view_experiment", raise_exception=True)
def experiment_detail(request: HttpRequest, experiment_id: int) -> HttpResponse:
    """The page, or (htmx) its live part, which stops polling (286) once the experiment ended."""
    experiment = get_object_or_404(
        Experiment.objects.select_related("dataset_version__dataset", "strategy", "strategy_version", "created_by"),
        pk=experiment_id,
    )
    context = {
        "experiment": experiment,
        **experiment_figures(experiment),
        "pairs": experiment_pairs(experiment)[:500],
        "can_stop": experiment.running and request.user.has_perm("feedback.add_experiment"),
    }
    if request.htmx:
        response = render(request, DETAIL + "#experiment-live", context)
        if not experiment.running:
            response.status_code = HttpResponseStopPolling.status_code
        return response
    return render(request, DETAIL, context)


@require_POST
@permission_required("feedback.add_experiment", raise_exception=True)
def experiment_stop_view(request: HttpRequest, experiment_id: int) -> HttpResponse:
    experiment = get_object_or_404(Experiment, pk=experiment_id)
    try:
        experiment_stop(experiment=experiment, user=request.user)
    except ValidationError as refused:
        messages.error(request, " ".join(refused.messages))
    else:
        messages.success(request, _("Experiment #%(id)s stopped; its figures so far are kept.") % {"id": experiment.pk})
    return redirect("feedback-experiment-detail", experiment_id=experiment.pk)
