"""Opaque cursors of the API's keyset pages. A cursor is the list's own keyset position, wrapped with
the order it belongs to: clients pass it back as it is, and a cursor of another order (or a mangled
one) is refused, not misread."""

import base64
import binascii
import json

from django.utils.translation import gettext as _

from .errors import invalid


def encode_cursor(order: str, direction: str, position: str) -> str:
    raw = json.dumps([order, direction, position], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, *, order: str) -> tuple[str, str]:
    """(direction, position) of ``cursor``, made for the list in ``order``; 400 otherwise."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        made_for, direction, position = json.loads(raw)
        valid = direction in ("after", "before") and isinstance(position, str) and isinstance(made_for, str)
    except (binascii.Error, ValueError, TypeError):
        valid = False
    if not valid:
        raise invalid({"cursor": [_("Not a cursor of this list: pass next_cursor or previous_cursor as given.")]})
    if made_for != order:
        raise invalid({"cursor": [_("This cursor belongs to the list sorted by %(order)s.") % {"order": made_for}]})
    return direction, position
