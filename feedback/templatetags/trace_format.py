import json

from django import template
from django.template.defaultfilters import floatformat
from django.utils.translation import gettext_lazy as _

register = template.Library()

# Payloads longer than this start clamped, with a "show all" button (static/js/trace.js).
CLAMP_CHARS = 1200
# A plan item's status as update_plan stores it (agent/tools/engine.py), as the page says it.
PLAN_STATUS_LABELS = {
    "pending": _("pending"),
    "in_progress": _("in progress"),
    "completed": _("completed"),
    "failed": _("failed"),
}


@register.filter
def as_json(value: object) -> str:
    """A step payload as indented JSON text. The template escapes it like any other text."""
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


@register.filter
def is_long(text: str) -> bool:
    return len(text) > CLAMP_CHARS


@register.filter
def plan_status(status: str) -> str:
    """A plan item's status in the reader's language (an unknown one as it was stored)."""
    return str(PLAN_STATUS_LABELS.get(status, status))


@register.filter
def payload_size(text: str) -> str:
    """A payload's size as a trace viewer shows it beside a folded payload: "312 B", "1.2 kB",
    "3.4 MB" (its UTF-8 bytes, decimal units), so a reader sees what opening it costs."""
    size = len(text.encode())
    if size < 1000:
        return f"{size} B"
    if size < 1_000_000:
        return f"{floatformat(size / 1000, 1)} kB"
    return f"{floatformat(size / 1_000_000, 1)} MB"


@register.filter
def duration(ms: int | None) -> str:
    """A time on the timeline: whole milliseconds under a second, else seconds with one decimal."""
    if ms is None:
        return "—"
    return f"{ms} ms" if ms < 1000 else f"{floatformat(ms / 1000, 1)} s"


@register.filter
def span_kind(step) -> str:
    """Whose time a step's bar is: a tool's (a tool call), the model's (each turn's first step is
    its model call: a thought, the final answer or a model error), or neither (a reflection)."""
    if step.kind == "tool_call":
        return "tool"
    return "other" if step.kind == "reflection" else "model"
