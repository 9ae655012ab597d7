import json

from django import template

register = template.Library()

# Payloads longer than this start clamped, with a "show all" button (static/js/trace.js).
CLAMP_CHARS = 1200


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
