"""The alert history (incidents and every notification of them) and the list of alert rules."""

import json

from django.contrib.auth.decorators import permission_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from feedback import alerts, selectors
from feedback.forms import AlertFilterForm
from feedback.models import AlertDelivery, AlertIncident

INCIDENTS_PER_PAGE = 20


def _describe(incident: AlertIncident) -> None:
    """What the page shows of an incident, in words, and of its notifications."""
    incident.subject_label = alerts.subject_label(incident)
    incident.summary = alerts.summary(incident)
    incident.resolved_summary = alerts.summary(incident, resolved=True) if incident.resolved_at else ""
    incident.dashboard_path = alerts.dashboard_path(incident)
    # As the receivers got them (the webhook's "figures"), for whoever wants every number.
    shown = {"opened": incident.figures}
    if incident.resolved_at:
        shown["resolved"] = incident.resolved_figures
    incident.figures_json = json.dumps(shown, indent=2, ensure_ascii=False, sort_keys=True)
    for delivery in incident.deliveries.all():
        webhook = delivery.channel == AlertDelivery.Channel.WEBHOOK
        delivery.shown_target = alerts.redacted(delivery.target) if webhook else delivery.target


@permission_required("feedback.view_alertincident", raise_exception=True)
def alert_list(request: HttpRequest) -> HttpResponse:
    form = AlertFilterForm(request.GET or None)
    filters = form.cleaned_data if form.is_bound and form.is_valid() else {}
    incidents = selectors.alert_incidents(state=filters.get("state") or "", rule=filters.get("rule"))
    page = Paginator(incidents, INCIDENTS_PER_PAGE).get_page(request.GET.get("page"))
    for incident in page:
        _describe(incident)
    query = request.GET.copy()
    query.pop("page", None)
    template = "feedback/alert_list.html"
    if request.htmx:
        template += "#alert-incidents"
    return render(request, template, {"form": form, "page": page, "query": query.urlencode()})


@permission_required("feedback.view_alertrule", raise_exception=True)
def alert_rule_list(request: HttpRequest) -> HttpResponse:
    rules = list(selectors.alert_rules())
    for rule in rules:
        rule.shown_webhooks = [alerts.redacted(url) for url in rule.webhook_url_list()]
        rule.condition = alerts.rule_condition(rule)
    can_edit = request.user.has_perm("feedback.change_alertrule")
    context = {"rules": rules, "can_edit": can_edit, "section": "alert-rules" if can_edit else None}
    return render(request, "feedback/alert_rule_list.html", context)
