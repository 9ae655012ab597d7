"""Sensitive calls that wait for a person: which calls need a confirmation, asking for one (the run
pauses and its worker lets go), and, when the run resumes, the calls people decided, made or refused.
"""

import json
import logging

from feedback import lifecycle
from feedback.models import Run, ToolConfirmation

from .invoker import invoke, parse_arguments, refused
from .llm import ToolCall
from .recorder import Recorder, retrying, storable
from .tools import Tool, ToolContext, ToolError

logger = logging.getLogger(__name__)


class Paused(Exception):
    """The run waits for a person; its worker slot is released."""


def needs_confirmation(call: ToolCall, tools: dict[str, Tool]) -> bool:
    tool = tools.get(call.name)
    if tool is None or not tool.sensitive:
        return False
    try:
        parse_arguments(call.arguments, tool)
    except ToolError:
        return False  # an invalid call is refused as such; no person needs to see it
    return True


def ask_for_confirmation(*, run: Run, lease: str, turn: int, calls: list[ToolCall], tools: dict[str, Tool]) -> None:
    """A confirmation asked for each call, then the run paused: raises Paused (unless a person asked
    to cancel the run meanwhile)."""
    for call in calls:
        retrying(
            lambda call=call: ToolConfirmation.objects.get_or_create(
                run=run,
                tool_call_id=call.id[:100],
                defaults={
                    "turn": turn,
                    "tool_name": call.name,
                    # Stored masked: on approval the invoker resolves the pseudonyms again.
                    "arguments": storable(parse_arguments(call.arguments, tools[call.name])),
                },
            ),
            what="asking for a confirmation",
        )
    if not lifecycle.run_pause(run_id=run.pk, lease=lease):
        return  # a person asked to cancel it meanwhile: the next turn ends it (and withdraws these)
    run.status, run.worker = Run.Status.AWAITING_CONFIRMATION, ""
    logger.info("run waits for confirmation of %s", ", ".join(c.name for c in calls))
    raise Paused


def resume_confirmed_calls(*, run: Run, record: Recorder, context: ToolContext, tools: dict[str, Tool]) -> None:
    """The calls people decided since the run paused, each recorded: made if approved, refused
    (saying who refused it and why) if not."""
    recorded = set(run.steps.values_list("tool_call_id", flat=True))
    decided = run.confirmations.filter(
        status__in=[ToolConfirmation.Status.APPROVED, ToolConfirmation.Status.REJECTED]
    ).exclude(tool_call_id__in=recorded)
    for confirmation in decided.order_by("requested_at", "pk"):
        call = ToolCall(confirmation.tool_call_id, confirmation.tool_name, json.dumps(confirmation.arguments))
        if confirmation.status == ToolConfirmation.Status.APPROVED:
            outcome = invoke(call.name, call.arguments, context, tools)
        else:
            who = confirmation.decided_by.get_username() if confirmation.decided_by else "a reviewer"
            reason = f": {confirmation.reason}" if confirmation.reason else "."
            outcome = refused(call.arguments, f"{who} refused this call{reason}", "Refused")
        record.tool_call(confirmation.turn, call, outcome)
