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


@register.filter
def usd(value: float | None) -> str:
    """US dollars: cents from a dime up, and three significant digits below (a model call can
    cost a hundredth of a cent); no cost (an unpriced model) shows as a dash."""
    if value is None:
        return "—"
    if value == 0 or abs(value) >= 0.1:
        return f"${value:,.2f}"
    return f"${value:.3g}" if abs(value) >= 1e-6 else f"${value:.1e}"
