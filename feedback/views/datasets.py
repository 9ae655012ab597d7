from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.core.exceptions import ValidationError
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from feedback import selectors
from feedback.datasets.imports import MAX_IMPORT_BYTES, ImportRefused, dataset_import
from feedback.datasets.services import dataset_from_evidence, dataset_from_runs
from feedback.forms.datasets import DatasetImportForm
from feedback.models import Dataset, DatasetItem, Strategy
from feedback.selectors.datasets import dataset_list, version_items
from feedback.uploads import accepts_uploads


@permission_required("feedback.view_dataset", raise_exception=True)
def datasets(request: HttpRequest) -> HttpResponse:
    return _list(request, DatasetImportForm())


def _list(
    request: HttpRequest, form: DatasetImportForm, refused: list | None = None, status: int = 200
) -> HttpResponse:
    context = {
        "datasets": dataset_list(),
        "form": form,
        "refused": refused or [],
        "can_import": request.user.has_perm("feedback.add_dataset"),
    }
    return render(request, "feedback/dataset_list.html", context, status=status)


# One file, up to the import's own limit, kept in memory (feedback/uploads.py).
@accepts_uploads(files=1, file_bytes=MAX_IMPORT_BYTES)
@require_POST
@permission_required("feedback.add_dataset", raise_exception=True)
def dataset_import_view(request: HttpRequest) -> HttpResponse:
    form = DatasetImportForm(request.POST, request.FILES)
    if not form.is_valid():
        return _list(request, form, status=400)
    data = form.cleaned_data
    try:
        version = dataset_import(name=data["name"], user=request.user, content=data["text"], fmt=data["format"])
    except ImportRefused as refused:
        # Nothing saved; the form keeps what was typed (a chosen file must be chosen again).
        return _list(request, form, refused=refused.errors, status=400)
    messages.success(
        request,
        _("%(name)s v%(n)s: %(items)s items imported.")
        % {"name": version.dataset.name, "n": version.number, "items": version.items.count()},
    )
    return redirect("feedback-dataset-detail", dataset_id=version.dataset_id)


@permission_required("feedback.view_dataset", raise_exception=True)
def dataset_detail(request: HttpRequest, dataset_id: int) -> HttpResponse:
    dataset = get_object_or_404(Dataset, pk=dataset_id)
    versions = list(dataset.versions.select_related("created_by").order_by("-number"))
    if not versions:
        raise Http404
    wanted = request.GET.get("version", "")
    version = next((v for v in versions if str(v.number) == wanted), versions[0])
    context = {"dataset": dataset, "versions": versions, "version": version, "items": version_items(version)}
    return render(request, "feedback/dataset_detail.html", context)


@require_POST
@permission_required("feedback.add_dataset", raise_exception=True)
def dataset_from_runs_view(request: HttpRequest) -> HttpResponse:
    """Runs selected in the run list (those the reader may see) as items of a dataset's new version."""
    ids = [int(v) for v in request.POST.getlist("run") if v.isdigit()]
    runs = list(selectors.runs_visible_to(request.user).filter(pk__in=ids).select_related("task__workspace"))
    name, checker = request.POST.get("name", "").strip(), request.POST.get("checker", "")
    if not runs or not name or checker not in DatasetItem.Checker.values:
        messages.error(request, _("Select runs, name the dataset and choose a checker."))
        return redirect("feedback-run-list")
    try:
        with transaction.atomic():
            dataset, _created = Dataset.objects.get_or_create(name=name[:100], defaults={"created_by": request.user})
            version = dataset_from_runs(runs=runs, user=request.user, checker=checker, dataset=dataset)
    except ValidationError as refused:
        messages.error(request, _("Nothing was added: %(why)s") % {"why": "; ".join(refused.messages)})
        return redirect("feedback-run-list")
    messages.success(
        request, _("%(n)s runs added: %(name)s v%(v)s.") % {"n": len(runs), "name": dataset.name, "v": version.number}
    )
    return redirect("feedback-dataset-detail", dataset_id=dataset.pk)


@require_POST
@permission_required("feedback.add_dataset", raise_exception=True)
def dataset_from_evidence_view(request: HttpRequest, strategy_id: int) -> HttpResponse:
    strategy = get_object_or_404(Strategy, pk=strategy_id)
    try:
        with transaction.atomic():
            version = dataset_from_evidence(strategy=strategy, user=request.user, name=f"evidence-{strategy.pk}")
    except (ValueError, ValidationError) as refused:
        why = "; ".join(refused.messages) if isinstance(refused, ValidationError) else str(refused)
        messages.error(request, _("No dataset was made: %(why)s") % {"why": why})
        return redirect("feedback-strategy-detail", strategy_id=strategy.pk)
    messages.success(
        request,
        _("%(name)s v%(v)s: %(n)s items from the evidence.")
        % {"name": version.dataset.name, "v": version.number, "n": version.items.count()},
    )
    return redirect("feedback-dataset-detail", dataset_id=version.dataset_id)
