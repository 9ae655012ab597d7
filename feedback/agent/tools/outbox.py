"""send_reply: the one sensitive built-in. It only writes into the run's outbox/ folder, but
it stands for actions with effects outside the agent, so a person confirms each call."""

import re
from typing import Any

from feedback.agent.sandbox import resolve
from feedback.privacy import MASKED_DOMAIN

from .base import ToolContext, ToolError

_ADDRESS = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


def send_reply(ctx: ToolContext, to: str, subject: str, body: str) -> dict[str, Any]:
    if not _ADDRESS.match(to):
        raise ToolError(f"{to!r} is not an email address.")
    if to.endswith("@" + MASKED_DOMAIN):
        # A pseudonym the invoker could not resolve from the run's files: nobody to send to.
        raise ToolError(f"{to!r} is a masked address that matches no sender in the run's files; use the real one.")
    outbox = resolve(ctx.workspace, "outbox")
    outbox.mkdir(exist_ok=True)
    number = len(list(outbox.glob("*.txt"))) + 1
    path = outbox / f"{number:03d}-reply.txt"
    path.write_text(f"To: {to}\nSubject: {subject}\n\n{body}\n", encoding="utf-8")
    return {"sent_to": to, "saved_as": f"outbox/{path.name}"}


SEND_REPLY = {
    "type": "object",
    "properties": {
        "to": {"type": "string", "maxLength": 200},
        "subject": {"type": "string", "maxLength": 200},
        "body": {"type": "string", "minLength": 1, "maxLength": 5000},
    },
    "required": ["to", "subject", "body"],
    "additionalProperties": False,
}
