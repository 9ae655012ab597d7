import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext
from django.views.decorators.http import require_POST

from feedback import selectors, services
from feedback.forms import ConfirmationForm
from feedback.models import Run, ToolConfirmation
from feedback.privacy import unmask_emails

# What a reviewer reads on a card, in this order, for the arguments that have a name people use
# (the others follow by name: PostgreSQL's jsonb keeps no order of its own).
ARGUMENT_LABELS = {"to": gettext_lazy("Recipient"), "subject": gettext_lazy("Subject"), "body": gettext_lazy("Body")}
_ARGUMENT_ORDER = {name: i for i, name in enumerate(ARGUMENT_LABELS)}


@dataclass(frozen=True)
class ShownArgument:
    label: str
    text: str
    # The stored pseudonym was resolved to the address the run read (for a confirmer's eyes only).
    revealed: bool


def with_arguments_shown(confirmations: Iterable[ToolConfirmation], *, user: AbstractBaseUser) -> list:
    """``confirmations``, each with ``shown``: its call's arguments as a reviewer reads them, one
    readable text per argument (no dict). Who may confirm sees the real email addresses, found as
    the invoker finds them at call time (in the run's sandbox files, privacy.unmask_emails); the
    row, and everyone else, keep the pseudonyms."""
    reveal = user.has_perm("feedback.confirm_toolconfirmation")
    confirmations = list(confirmations)
    for confirmation in confirmations:
        # A decided call is shown by its decision alone: only pending ones need the files read.
        files = (
            _run_files(confirmation.run) if reveal and confirmation.status == ToolConfirmation.Status.PENDING else None
        )
        arguments = confirmation.arguments if isinstance(confirmation.arguments, dict) else {"": confirmation.arguments}
        ordered = sorted(
            arguments.items(), key=lambda item: (_ARGUMENT_ORDER.get(item[0], len(_ARGUMENT_ORDER)), item[0])
        )
        confirmation.shown = [_shown(name, value, files) for name, value in ordered]
    return confirmations


def _run_files(run: Run) -> Path | None:
    from feedback.agent.sandbox import sandbox_path

    sandbox = sandbox_path(run)
    if sandbox.is_dir():
        return sandbox
    # The web server on another machine than the worker's (sandboxes are not shared): the files
    # the run was given, its task's workspace (uploads included), hold the senders it read.
    return run.task.workspace.path if run.task.workspace_id else None


def _shown(name: str, value: object, files: Path | None) -> ShownArgument:
    text = value if isinstance(value, str) else json.dumps(value, indent=2, ensure_ascii=False)
    real = unmask_emails(text, files) if files is not None else text
    return ShownArgument(label=str(ARGUMENT_LABELS.get(name, name)), text=real, revealed=real != text)


def decided_message(decided: services.ConfirmationDecided, *, approve: bool) -> str:
    """What a decision did, as it did it: the run resumes only when nothing else of it waits."""
    values = {"id": decided.confirmation.run_id, "count": decided.waiting}
    if decided.waiting:
        if approve:
            text = ngettext(
                "Approved: run #%(id)s still waits for %(count)d other call.",
                "Approved: run #%(id)s still waits for %(count)d other calls.",
                decided.waiting,
            )
        else:
            text = ngettext(
                "Refused: run #%(id)s still waits for %(count)d other call.",
                "Refused: run #%(id)s still waits for %(count)d other calls.",
                decided.waiting,
            )
        return text % values
    if approve:
        return _("Approved: run #%(id)s resumes.") % values
    return _("Refused: run #%(id)s continues without it.") % values


@permission_required("feedback.view_toolconfirmation", raise_exception=True)
def confirmation_list(request: HttpRequest) -> HttpResponse:
    pending = with_arguments_shown(
        selectors.confirmations_waiting().select_related("run", "run__task", "run__task__workspace"),
        user=request.user,
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
            decided = services.confirmation_decide(
                confirmation=confirmation, user=request.user, approve=approve, reason=form.cleaned_data["reason"]
            )
        except services.AlreadyDecided as first:
            messages.warning(request, str(first))
        except services.StaleConfirmation as stale:
            messages.error(request, str(stale))
        else:
            messages.success(request, decided_message(decided, approve=approve))
    next_url = request.POST.get("next", "")
    if url_has_allowed_host_and_scheme(next_url, allowed_hosts={request.get_host()}):
        return redirect(next_url)
    return redirect("feedback-confirmation-list")
