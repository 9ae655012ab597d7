from django import template

register = template.Library()


@register.filter
def percent(value: float | None, digits: int = 0) -> str:
    """A rate as a percentage; no data shows as a dash, never as 0 %."""
    if value is None:
        return "—"
    return f"{value * 100:.{int(digits)}f} %"


@register.filter
def number(value: float | None, digits: int = 2) -> str:
    if value is None:
        return "—"
    return f"{value:.{int(digits)}f}"
