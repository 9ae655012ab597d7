import json

from django import template
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
def went_wrong(step) -> bool:
    """A failed call, a failed validation or a model error: what the trace makes stand out."""
    return step.success is False or step.validation_status == "fail" or step.kind == "model_error"


@register.filter
def plan_status(status: str) -> str:
    """A plan item's status in the reader's language (an unknown one as it was stored)."""
    return str(PLAN_STATUS_LABELS.get(status, status))
