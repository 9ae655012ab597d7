"""Confirmations: the sensitive tool calls waiting for a person, and a reviewer's decision on
one, through the same service as the confirmations page (services.confirmation_decide). A call
whose run ended (withdrawn) or is not waiting for it is refused with 409, and the detail says
why; a decision says whether the run resumes. Arguments are shown as stored (masked)."""

from datetime import datetime
from typing import Any, Literal

from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from ninja import Router
from pydantic import ConfigDict, Field

from feedback import selectors, services
from feedback.forms import ConfirmationForm
from feedback.models import ToolConfirmation

from .auth import require_perm, require_write, user_of
from .errors import ApiError, form_invalid, refusals
from .outputs import Out, UserName, path_field
from .schemas import NO_NUL, NOT_BLANK, Body, RunStatus, Text, states

router = Router(tags=["confirmations"])

ConfirmationStatus = Literal[tuple(ToolConfirmation.Status.values)]  # type: ignore[valid-type]


class ConfirmationOut(Out):
    id: int
    run_id: int
    run_status: RunStatus = path_field("run", "status")
    turn: int
    tool_name: str
    arguments: Any = Field(description="The call's arguments, as stored (personal data masked)")
    status: ConfirmationStatus
    requested_at: datetime
    decided_at: datetime | None = Field(description="When it was decided, or withdrawn")
    decided_by: UserName = Field(description="Who decided it, or cancelled its run")
    reason: str = Field(description="The reason given, or why it was withdrawn")


class ConfirmationListOut(Out):
    data: list[ConfirmationOut]


class ConfirmationDecisionIn(Body):
    # The form's rule, stated for clients: a refusal says why (whitespace alone is no reason).
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "if": {"properties": {"decision": {"const": "reject"}}, "required": ["decision"]},
            "then": {"properties": {"reason": {"minLength": 1, "pattern": NOT_BLANK}}, "required": ["reason"]},
        },
    )

    decision: Literal["approve", "reject"]
    reason: Text = Field(
        "", max_length=1000, description="Needed to reject: the model reads it", **states(pattern=NO_NUL)
    )


class ConfirmationDecidedOut(Out):
    confirmation: ConfirmationOut
    run_resumed: bool = Field(description="Nothing else of the run waits: it is queued again")
    waiting: int = Field(description="The run's calls still waiting for a person")


@router.get("/confirmations", response={200: ConfirmationListOut, **refusals()}, summary="List waiting calls")
def list_confirmations(request: HttpRequest) -> dict:
    """The calls waiting for a person, oldest first: never a withdrawn one (its run ended)."""
    require_perm(user_of(request), "feedback.view_toolconfirmation")
    return {"data": list(selectors.confirmations_waiting().select_related("run", "decided_by"))}


@router.post(
    "/confirmations/{confirmation_id}/decide",
    response={200: ConfirmationDecidedOut, **refusals(400, 404, 409)},
    summary="Approve or refuse a call",
)
def decide_confirmation(request: HttpRequest, confirmation_id: int, payload: ConfirmationDecisionIn) -> dict:
    """Approve or refuse a call its run waits for. 409 when someone decided it first, or when it
    is stale (withdrawn when its run ended, or its run is not waiting for it): nothing is decided,
    and ``detail`` says why."""
    user = require_write(request)
    require_perm(user, "feedback.confirm_toolconfirmation")
    confirmation = get_object_or_404(ToolConfirmation, pk=confirmation_id)
    form = ConfirmationForm(payload.model_dump())
    if not form.is_valid():
        raise form_invalid(form)
    try:
        decided = services.confirmation_decide(
            confirmation=confirmation,
            user=user,
            approve=form.cleaned_data["decision"] == "approve",
            reason=form.cleaned_data["reason"],
        )
    except (services.AlreadyDecided, services.StaleConfirmation) as refused:
        raise ApiError(409, str(refused)) from None
    shown = ToolConfirmation.objects.select_related("run", "decided_by").get(pk=decided.confirmation.pk)
    return {"confirmation": shown, "run_resumed": decided.resumed, "waiting": decided.waiting}
