"""Settings: alert rules, created, edited, switched on or off and deleted by operators (the list
is feedback/views/alerts.py alert_rule_list, which reviewers may read)."""

from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from feedback import settings_services
from feedback.models import AlertRule
from feedback.settings_forms import AlertRuleForm

from .settings_common import delete_page, edit_page

SECTION = "alert-rules"


def _back() -> str:
    return reverse("feedback-alert-rule-list")


@permission_required("feedback.add_alertrule", raise_exception=True)
def alert_rule_create(request: HttpRequest) -> HttpResponse:
    return edit_page(
        request, form_class=AlertRuleForm, instance=None, title=_("New alert rule"), back_url=_back(), section=SECTION
    )


@permission_required("feedback.change_alertrule", raise_exception=True)
def alert_rule_edit(request: HttpRequest, rule_id: int) -> HttpResponse:
    rule = get_object_or_404(AlertRule, pk=rule_id)
    title = _("Alert rule “%(name)s”") % {"name": rule.name}
    return edit_page(request, form_class=AlertRuleForm, instance=rule, title=title, back_url=_back(), section=SECTION)


@require_POST
@permission_required("feedback.change_alertrule", raise_exception=True)
def alert_rule_toggle(request: HttpRequest, rule_id: int) -> HttpResponse:
    rule = settings_services.alert_rule_toggle(rule=get_object_or_404(AlertRule, pk=rule_id), by=request.user)
    if rule.enabled:
        messages.success(request, _("“%(name)s” is on: beat checks it every minute.") % {"name": rule.name})
    else:
        messages.success(request, _("“%(name)s” is off: beat no longer checks it.") % {"name": rule.name})
    return redirect(_back())


@permission_required("feedback.delete_alertrule", raise_exception=True)
def alert_rule_delete(request: HttpRequest, rule_id: int) -> HttpResponse:
    rule = get_object_or_404(AlertRule, pk=rule_id)
    return delete_page(
        request,
        instance=rule,
        what=_("the alert rule “%(name)s”") % {"name": rule.name},
        consequence=_("Its incidents and the record of their notifications are deleted with it."),
        back_url=_back(),
        section=SECTION,
    )
