"""The reviewer inbox (issue 26.1): confirmations, proposals and runs to score in one list, with
claims and "Save & next". Each decision goes through the same service as its own page."""

from django.contrib import messages
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied, ValidationError
from django.forms import Form
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import urlencode
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_POST

from feedback import services
from feedback.forms import ConfirmationForm, HumanScoreForm, InboxFilterForm, ProposalDecisionForm
from feedback.models import InboxClaim
from feedback.selectors.inbox import KIND_PERMISSIONS, Inbox, InboxItem, ItemRef, inbox, inbox_item, inbox_next
from feedback.strategies import services as strategy_services

from .confirmations import decided_message, with_arguments_shown

Kind = InboxClaim.Kind
# The counts' labels: what is counted, in the plural.
COUNT_LABELS = {
    Kind.CONFIRMATION: gettext_lazy("Confirmations"),
    Kind.PROPOSAL: gettext_lazy("Proposals"),
    Kind.RUN: gettext_lazy("Runs to score"),
}
DECISION_FORMS: dict[str, type[Form]] = {
    Kind.CONFIRMATION: ConfirmationForm,
    Kind.PROPOSAL: ProposalDecisionForm,
    Kind.RUN: HumanScoreForm,
}


def _ref(request: HttpRequest, kind: str, pk: int) -> ItemRef:
    if kind not in KIND_PERMISSIONS:
        raise Http404
    if not request.user.has_perm(KIND_PERMISSIONS[kind]):
        raise PermissionDenied
    return ItemRef(kind=kind, pk=pk)


def _filter_query(request: HttpRequest) -> tuple[dict, str]:
    """The current filters (from the query string, on a page and on its forms' actions alike)."""
    form = InboxFilterForm(request.GET)
    filters = form.filters()
    shown = {"kind": filters["kind"], "reason": filters["reason"], "strategy": filters["strategy_id"] or ""}
    return filters, urlencode({k: v for k, v in shown.items() if v})


def _inbox_url(query: str, item: InboxItem | ItemRef | None = None) -> str:
    parts = [query] if query else []
    if item is not None:
        parts.append(urlencode({"item": item.key}))
    return reverse("feedback-inbox") + ("?" + "&".join(parts) if parts else "")


def _kind_url(filters: dict, kind: str) -> str:
    """The count's link: the same reason and strategy, this kind only."""
    query = {"kind": kind, "reason": filters["reason"], "strategy": filters["strategy_id"] or ""}
    return reverse("feedback-inbox") + "?" + urlencode({k: v for k, v in query.items() if v})


def _current(box: Inbox, key: str, user: AbstractBaseUser) -> InboxItem | None:
    """The item asked for if it is still there, else the first one free for ``user``."""
    ref = ItemRef.parse(key)
    chosen = next((i for i in box.items if i.ref == ref), None)
    return chosen or next((i for i in box.items if i.free_for(user)), None) or next(iter(box.items), None)


def _page(request: HttpRequest, *, current_key: str, form: Form | None = None, status: int = 200) -> HttpResponse:
    filters, query = _filter_query(request)
    box = inbox(user=request.user, **filters)
    current = _current(box, current_key, request.user)
    for item in box.items:
        item.href = _inbox_url(query, item)
    if current is not None and current.kind == Kind.CONFIRMATION:
        with_arguments_shown([current.obj], user=request.user)
    context = {
        "box": box,
        "counts": [
            {"kind": kind, "label": COUNT_LABELS[kind], "count": box.counts[kind], "href": _kind_url(filters, kind)}
            for kind in box.kinds
        ],
        "filter_form": InboxFilterForm(request.GET),
        "filters": filters,
        "query": query,
        "current": current,
        "decision_form": form or (DECISION_FORMS[current.kind]() if current else None),
        "mine": current is not None and current.claim is not None and current.claim.claimed_by_id == request.user.pk,
    }
    template = "feedback/inbox.html"
    if request.htmx:
        template += "#inbox-body"
    return render(request, template, context, status=status)


def inbox_page(request: HttpRequest) -> HttpResponse:
    if not any(request.user.has_perm(perm) for perm in KIND_PERMISSIONS.values()):
        raise PermissionDenied
    return _page(request, current_key=request.GET.get("item", ""))


@require_POST
def inbox_claim(request: HttpRequest, kind: str, pk: int) -> HttpResponse:
    ref = _ref(request, kind, pk)
    _filters, query = _filter_query(request)
    action = request.POST.get("action", "claim")
    if inbox_item(ref=ref) is None:
        messages.info(request, _("This item no longer waits for a reviewer."))
        return redirect(_inbox_url(query))
    if action == "unclaim":
        if services.inbox_unclaim(item=ref, user=request.user):
            messages.success(request, _("You gave the item back."))
        return redirect(_inbox_url(query, ref))
    held = InboxClaim.objects.filter(kind=ref.kind, object_id=ref.pk).select_related("claimed_by").first()
    try:
        services.inbox_claim(item=ref, user=request.user, take_over=action == "take_over")
    except services.AlreadyClaimed as first:
        messages.warning(request, str(first))
    else:
        if action == "take_over" and held is not None and held.claimed_by_id != request.user.pk and held.is_live():
            messages.success(request, _("You took the item over from %(user)s.") % {"user": held.claimed_by})
        else:
            messages.success(request, _("The item is yours until you decide it or give it back."))
    return redirect(_inbox_url(query, ref))


@require_POST
def inbox_decide(request: HttpRequest, kind: str, pk: int) -> HttpResponse:
    """Decide one item and move to the next one in the same filter ("Save & next")."""
    ref = _ref(request, kind, pk)
    filters, query = _filter_query(request)
    order = [i.ref for i in inbox(user=request.user, **filters).items]
    item = inbox_item(ref=ref)
    if item is None:
        messages.info(request, _("This item no longer waits for a reviewer."))
        return _to_next(request, ref, order, filters, query)
    if not item.free_for(request.user):
        messages.error(
            request, _("%(user)s claimed this item: take it over to decide it.") % {"user": item.claim.claimed_by}
        )
        return redirect(_inbox_url(query, ref))
    form = DECISION_FORMS[ref.kind](request.POST)
    if not form.is_valid():
        # Nothing decided: the same item again, with what was typed and what was missing.
        return _page(request, current_key=ref.key, form=form, status=400)
    if not _decide(request, item, form.cleaned_data):
        return redirect(_inbox_url(query, ref))
    services.inbox_release(item=ref)
    return _to_next(request, ref, order, filters, query)


def _decide(request: HttpRequest, item: InboxItem, data: dict) -> bool:
    """The kind's own service; a message says what happened. False: stay on the item."""
    user = request.user
    if item.kind == Kind.RUN:
        services.run_add_human_score(run=item.obj, user=user, **data)
        messages.success(request, _("Your score for run #%(id)s is recorded.") % {"id": item.pk})
        return True
    if item.kind == Kind.CONFIRMATION:
        approve = data["decision"] == "approve"
        try:
            decided = services.confirmation_decide(
                confirmation=item.obj, user=user, approve=approve, reason=data["reason"]
            )
        except (services.AlreadyDecided, services.StaleConfirmation) as gone:
            messages.warning(request, str(gone))  # decided elsewhere: move on all the same
            return True
        messages.success(request, decided_message(decided, approve=approve))
        return True
    try:
        strategy = strategy_services.strategy_decide(strategy=item.obj, reviewer=user, **data)
    except strategy_services.IllegalTransition as exc:
        messages.warning(request, str(exc))
        return True
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
        return False
    messages.success(request, _("Strategy #%(id)s is now %(status)s.") % {
        "id": strategy.pk, "status": strategy.get_status_display().lower()})  # fmt: skip
    return True


def _to_next(request: HttpRequest, ref: ItemRef, order: list[ItemRef], filters: dict, query: str) -> HttpResponse:
    after = inbox(user=request.user, **filters)
    return redirect(_inbox_url(query, inbox_next(after.items, after=ref, order=order, user=request.user)))
