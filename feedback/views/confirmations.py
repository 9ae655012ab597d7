from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from feedback import services
from feedback.forms import ConfirmationForm
from feedback.models import ToolConfirmation


@permission_required("feedback.view_toolconfirmation", raise_exception=True)
def confirmation_list(request: HttpRequest) -> HttpResponse:
    pending = (
        ToolConfirmation.objects.filter(status=ToolConfirmation.Status.PENDING)
        .select_related("run", "run__task")
        .order_by("requested_at")
    )
    recent = (
        ToolConfirmation.objects.exclude(status=ToolConfirmation.Status.PENDING)
        .select_related("run", "decided_by")
        .order_by("-decided_at")[:20]
    )
    return render(request, "feedback/confirmation_list.html", {"pending": pending, "recent": recent})


@require_POST
def confirmation_decide(request: HttpRequest, confirmation_id: int) -> HttpResponse:
    if not request.user.has_perm("feedback.confirm_toolconfirmation"):
        raise PermissionDenied
    confirmation = get_object_or_404(ToolConfirmation, pk=confirmation_id)
    form = ConfirmationForm(request.POST)
    if not form.is_valid():
        # Nothing is decided: the card is still there, and says what was missing.
        for errors in form.errors.values():
            messages.error(request, " ".join(errors))
    else:
        approve = form.cleaned_data["decision"] == "approve"
        try:
            services.confirmation_decide(
                confirmation=confirmation, user=request.user, approve=approve, reason=form.cleaned_data["reason"]
            )
        except services.AlreadyDecided:
            messages.warning(request, _("This call was already decided by someone else."))
        else:
            if approve:
                messages.success(request, _("Approved: run #%(id)s resumes.") % {"id": confirmation.run_id})
            else:
                messages.success(request, _("Refused: run #%(id)s continues without it.") % {"id": confirmation.run_id})
    next_url = request.POST.get("next", "")
    if url_has_allowed_host_and_scheme(next_url, allowed_hosts={request.get_host()}):
        return redirect(next_url)
    return redirect("feedback-confirmation-list")
