"""The alert history and the rules."""

from django.db.models import Count, Max, Prefetch, Q, QuerySet

from feedback.models import AlertDelivery, AlertIncident, AlertRule


def alert_incidents(*, state: str = "", rule: AlertRule | None = None) -> QuerySet[AlertIncident]:
    """The alert history, newest first, each incident with its deliveries and their attempts."""
    incidents = AlertIncident.objects.select_related("rule").prefetch_related(
        Prefetch("deliveries", queryset=AlertDelivery.objects.prefetch_related("attempt_rows").order_by("id"))
    )
    if state:
        incidents = incidents.filter(state=state)
    if rule is not None:
        incidents = incidents.filter(rule=rule)
    return incidents.order_by("-opened_at", "-id")


def alert_rules() -> QuerySet[AlertRule]:
    """Every rule with its open incidents and when it last opened one."""
    return (
        AlertRule.objects.select_related("updated_by")
        .annotate(
            open_incidents=Count("incidents", filter=Q(incidents__state=AlertIncident.State.OPEN)),
            last_opened_at=Max("incidents__opened_at"),
        )
        .order_by("name", "id")
    )
