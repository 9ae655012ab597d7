"""Incidents: findings opened and resolved once per rule and subject, their notifications queued."""

import logging
from datetime import datetime

from django.db import IntegrityError, transaction
from django.utils import timezone

from feedback import queue
from feedback.alerts.conditions import CHECKS, Finding
from feedback.alerts.delivery import alert_deliveries_resend
from feedback.models import AlertDelivery, AlertIncident, AlertRule, Strategy

logger = logging.getLogger(__name__)


def alerts_evaluate(*, now: datetime | None = None) -> None:
    """Beat's every-minute job: every enabled rule; the open incidents of disabled rules resolve
    (their receivers may be keeping them open); lost notifications are queued again."""
    now = now or timezone.now()
    for rule in AlertRule.objects.filter(enabled=True):
        try:
            rule_evaluate(rule=rule, now=now)
        except Exception:
            # One rule that cannot be evaluated (a query that fails) must not silence the others.
            logger.exception("alert rule %s could not be evaluated", rule.pk)
    disabled = AlertIncident.objects.filter(state=AlertIncident.State.OPEN, rule__enabled=False).select_related("rule")
    for incident in disabled:
        incident_resolve(incident=incident, figures={"reason": "rule_disabled"}, now=now)
    alert_deliveries_resend()


def rule_evaluate(*, rule: AlertRule, now: datetime) -> list[Finding]:
    # Read before the checks, as any evaluation may be: another one can open or resolve an
    # incident meanwhile, which the constraint and the conditional updates below account for.
    open_incidents = {i.subject: i for i in rule.incidents.filter(state=AlertIncident.State.OPEN)}
    findings = CHECKS[rule.kind](rule, now)
    for finding in findings:
        incident = open_incidents.pop(finding.subject, None)
        if finding.holds and incident is None:
            incident_open(rule=rule, subject=finding.subject, figures=finding.figures, now=now)
        elif finding.holds:
            AlertIncident.objects.filter(pk=incident.pk, state=AlertIncident.State.OPEN).update(checked_at=now)
        elif finding.holds is False and incident is not None:
            incident_resolve(incident=incident, figures=finding.figures, now=now)
    for incident in open_incidents.values():  # subjects no longer watched
        incident_resolve(incident=incident, figures=_gone(incident.subject), now=now)
    return findings


def _gone(subject: str) -> dict:
    if subject.startswith("strategy-"):
        strategy = Strategy.objects.filter(pk=int(subject.split("-")[1])).values("pk", "title", "status").first()
        if strategy:
            reason = "not_active" if subject.endswith("-active") else "not_on_trial"
            return {"reason": reason, "strategy": strategy["pk"], "title": strategy["title"],
                    "status": strategy["status"]}  # fmt: skip
    return {"reason": "not_watched"}


def incident_open(*, rule: AlertRule, subject: str, figures: dict, now: datetime) -> AlertIncident | None:
    """Open an incident and queue its notifications; None when another evaluation opened it first."""
    try:
        with transaction.atomic():
            incident = AlertIncident.objects.create(
                rule=rule, subject=subject, figures=figures, opened_at=now, checked_at=now
            )
            _notify(incident, rule, AlertDelivery.Event.OPEN)
    except IntegrityError:
        return None  # its notifications are the other evaluation's to send
    return incident


def incident_resolve(*, incident: AlertIncident, figures: dict, now: datetime) -> bool:
    """Resolve an open incident and queue its notifications; False when it was resolved already."""
    with transaction.atomic():
        resolved = AlertIncident.objects.filter(pk=incident.pk, state=AlertIncident.State.OPEN).update(
            state=AlertIncident.State.RESOLVED, resolved_at=now, resolved_figures=figures
        )
        if resolved:
            _notify(incident, incident.rule, AlertDelivery.Event.RESOLVE)
    return bool(resolved)


def _notify(incident: AlertIncident, rule: AlertRule, event: str) -> None:
    targets = [(AlertDelivery.Channel.WEBHOOK, url) for url in rule.webhook_url_list()]
    targets += [(AlertDelivery.Channel.EMAIL, address) for address in rule.email_list()]
    for channel, target in targets:
        delivery = AlertDelivery.objects.create(incident=incident, event=event, channel=channel, target=target)
        queue.alert_deliver(delivery.pk)
