from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from feedback.datasets.imports import MAX_IMPORT_BYTES, ImportRefused, dataset_import
from feedback.forms.datasets import DatasetImportForm
from feedback.models import Dataset
from feedback.selectors.datasets import dataset_list, version_items
from feedback.uploads import accepts_uploads


@permission_required("feedback.view_dataset", raise_exception=True)
def datasets(request: HttpRequest) -> HttpResponse:
    return _list(request, DatasetImportForm())


def _list(
    request: HttpRequest, form: DatasetImportForm, refused: list | None = None, status: int = 200
) -> HttpResponse:
    context = {"datasets": dataset_list(), "form": form, "refused": refused or [],
               "can_import": request.user.has_perm("feedback.add_dataset")}  # fmt: skip
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
    messages.success(request, _("%(name)s v%(n)s: %(items)s items imported.")
                     % {"name": version.dataset.name, "n": version.number, "items": version.items.count()})  # fmt: skip
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
