"""Alerts: rules beat checks every minute, incidents opened and resolved once, and their notifications.

Every enabled rule is evaluated into *findings*, one per subject it watches (all runs or one task
kind; a strategy on trial's harm and its split; queued, running and awaiting runs), each with its
figures and whether the condition holds: yes, no, or cannot be judged yet (fewer runs than the
rule's minimum). Then, per subject:

- it holds and no incident is open: an incident opens, and its "open" notifications are queued
  (one per webhook URL and email address of the rule), in the same transaction;
- it holds and an incident is open: the incident stays open (``checked_at`` moves), nothing is sent;
- it does not hold (or the subject is gone: the strategy left its trial, the rule's scope changed)
  and an incident is open: the incident resolves, and its "resolve" notifications are queued;
- it cannot be judged: nothing changes, either way.

**No duplicates for one incident**, also when two beats or a redelivered task evaluate at the same
moment: opening is an INSERT that a partial unique constraint (one open incident per rule and
subject) lets through once; resolving is a conditional UPDATE from "open" that one evaluation wins.
Only the winner queues notifications, each a row unique per incident, event, channel and target.

Each notification is sent by its own task (a failing channel holds up no other), one
``AlertAttempt`` row per try. A worker claims an attempt by a conditional UPDATE that moves
``next_attempt_at`` past its timeout, so a duplicate message finds the delivery taken. Webhooks
are retried on a 5xx, a timeout or an unreachable receiver, never on a 4xx or a redirect; mail on
an unreachable server or a 4xx reply.
"""

import hashlib
import hmac
import http.client
import json
import logging
import smtplib
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import urlencode, urlsplit

from django.conf import settings
from django.core.mail import EmailMessage, get_connection
from django.db import IntegrityError, transaction
from django.db.models import Count, Exists, F, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce, Greatest
from django.urls import reverse
from django.utils import timezone, translation
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from feedback import metrics, queue
from feedback.metrics import Window
from feedback.models import (
    AlertAttempt,
    AlertDelivery,
    AlertIncident,
    AlertRule,
    Run,
    Step,
    Strategy,
    Task,
    ToolConfirmation,
)
from feedback.strategies.trials import GUARD_LABELS, GUARDRAIL_REFUSAL, trial_stats

logger = logging.getLogger(__name__)

# A worker that takes an attempt holds it this much longer than the attempt's timeout.
CLAIM_MARGIN_SECONDS = 60
# A broker's clock may run a little ahead of the database's: a retry may start this early.
CLOCK_SLACK = timedelta(seconds=2)
# A pending notification whose attempt is this overdue lost its message: queue it again.
RESEND_AFTER = timedelta(minutes=2)
# Stuck runs named in an incident's figures (the count covers them all).
STUCK_LISTED = 10
# What is read of a webhook receiver's answer (it only has to say 2xx).
ANSWER_READ_BYTES = 64 * 1024

SIGNATURE_HEADER = "X-Feedback-Signature"
TIMESTAMP_HEADER = "X-Feedback-Timestamp"


@dataclass(frozen=True)
class Finding:
    subject: str
    holds: bool | None  # None: too few runs to judge; the incident's state stays as it is
    figures: dict


# --- the conditions --------------------------------------------------------------------------
def _scopes(rule: AlertRule) -> list[str]:
    return list(Task.Kind.values) if rule.task_kind == AlertRule.EACH_KIND else [rule.task_kind]


def _windows(rule: AlertRule, now: datetime, kind: str) -> tuple[Window, Window]:
    """The rule's recent window and the one as long just before it."""
    length = timedelta(minutes=rule.window_minutes)
    before = now - length
    return Window(since=before, until=now, kind=kind), Window(since=before - length, until=before, kind=kind)


def _judge(rule: AlertRule, *, kind: str, current: dict, previous: dict, lower_is_worse: bool) -> Finding:
    """Past the threshold, or moved the wrong way by at least the rule's change since the window
    before; ``current`` and ``previous`` hold ``value`` and the ``runs`` it is judged on."""
    sign = -1 if lower_is_worse else 1
    judged = current["runs"] >= rule.min_runs
    checks: list[bool] = []
    reasons = []
    if rule.threshold is not None:
        past = judged and current["value"] is not None and sign * (current["value"] - rule.threshold) > 0
        checks.append(past)
        reasons += ["threshold"] if past else []
    if rule.change is not None:
        # Not judged when the window before had too few runs to compare with.
        moved = (
            judged
            and previous["runs"] >= rule.min_runs
            and None not in (current["value"], previous["value"])
            and sign * (current["value"] - previous["value"]) >= rule.change - 1e-9
        )
        checks.append(moved)
        reasons += ["change"] if moved else []
    holds = any(checks) if judged else None
    figures = {
        "task_kind": kind,
        "window_minutes": rule.window_minutes,
        **current,
        "previous_value": previous["value"],
        "previous_runs": previous["runs"],
        "threshold": rule.threshold,
        "change": rule.change,
        "min_runs": rule.min_runs,
        "reasons": reasons,
    }
    return Finding(kind or "all", holds, figures)


def _average_score(window: Window) -> dict:
    summary = metrics.score_summary(window)
    return {"value": summary["avg_score"], "runs": summary["scored"]}


def check_score_drop(rule: AlertRule, now: datetime) -> list[Finding]:
    """The average score (metrics.score_summary: ended runs with a score) of the runs created in
    the window below the threshold, or dropped by the change against the window before."""
    findings = []
    for kind in _scopes(rule):
        current, previous = _windows(rule, now, kind)
        findings.append(
            _judge(rule, kind=kind, current=_average_score(current), previous=_average_score(previous),
                   lower_is_worse=True)
        )  # fmt: skip
    return findings


def _failed_run_rate(window: Window) -> dict:
    """Of the window's finished runs (answered or failed), those with a failed tool call (a
    guardrail's refusal aside) or a failed status: the trials' error-rate counter-metric."""
    failed_call = Step.objects.filter(run=OuterRef("pk"), kind=Step.Kind.TOOL_CALL, success=False).exclude(
        error_class=GUARDRAIL_REFUSAL
    )
    row = (
        window.runs()
        .filter(status__in=[Run.Status.SUCCEEDED, Run.Status.FAILED])
        .annotate(had_error=Exists(failed_call))
        .aggregate(runs=Count("id"), failing=Count("id", filter=Q(had_error=True) | Q(status=Run.Status.FAILED)))
    )
    return {"value": metrics.rate(row["failing"], row["runs"]), "runs": row["runs"], "failing": row["failing"]}


def _repeated_error_rate(window: Window) -> dict:
    """metrics.repeated_error_summary: repeated errors / errors of the runs created in the
    window; no error at all among enough runs is judged as a rate of 0."""
    summary = metrics.repeated_error_summary(window)
    rate = summary["repeated_rate"] if summary["errors"] else 0.0
    return {"value": rate, "runs": summary["runs"], "errors": summary["errors"], "repeated": summary["repeated"]}


def check_error_rate(rule: AlertRule, now: datetime) -> list[Finding]:
    measure = _failed_run_rate if rule.error_measure == AlertRule.ErrorMeasure.FAILED_RUNS else _repeated_error_rate
    findings = []
    for kind in _scopes(rule):
        current, previous = _windows(rule, now, kind)
        finding = _judge(rule, kind=kind, current=measure(current), previous=measure(previous), lower_is_worse=False)
        finding.figures["measure"] = rule.error_measure
        findings.append(finding)
    return findings


def check_harmful_trial(rule: AlertRule, now: datetime) -> list[Finding]:
    """Per strategy on trial, by its trial's own statistics (strategies/trials.py): harm, when
    the treatment's scores are significantly worse (the always-valid interval below zero) or a
    counter-metric is (the ones that block promotion); and a sample-ratio mismatch of its split.
    Judged once the trial has ``min_runs`` runs assigned, both arms together."""
    findings = []
    for strategy in Strategy.objects.filter(status=Strategy.Status.TRIAL).order_by("pk"):
        stats = trial_stats(strategy)
        split = stats.split
        assigned = split.treatment + split.control
        judged = assigned >= rule.min_runs
        base = {"strategy": strategy.pk, "title": strategy.title, "assigned": assigned, "min_runs": rule.min_runs}
        worse = [guard.name for guard in stats.guards if guard.worse]
        harm = {
            **base,
            "difference": stats.difference,
            "ci_low": stats.ci_low,
            "ci_high": stats.ci_high,
            "treatment_n": stats.treatment.n,
            "control_n": stats.control.n,
            "recommendation": stats.recommendation,
            "scores_worse": stats.harmed,
            "worse_counter_metrics": worse,
        }
        harmed = stats.harmed or bool(worse)
        findings.append(Finding(f"strategy-{strategy.pk}-harm", harmed if judged else None, harm))
        mismatch = {**base, "treatment": split.treatment, "control": split.control, "fraction": split.fraction,
                    "observed": split.observed, "p_value": split.p_value}  # fmt: skip
        findings.append(Finding(f"strategy-{strategy.pk}-split", split.mismatch if judged else None, mismatch))
    return findings


def _stuck(subject: str, runs: QuerySet[Run], minutes: int, now: datetime) -> Finding:
    listed = list(runs.order_by("waiting_since", "pk").values_list("pk", "waiting_since")[:STUCK_LISTED])
    count = runs.count() if len(listed) == STUCK_LISTED else len(listed)
    figures = {"runs": count, "run_ids": [pk for pk, _since in listed], "limit_minutes": minutes}
    if listed:
        figures["oldest_run"] = listed[0][0]
        figures["oldest_minutes"] = int((now - listed[0][1]).total_seconds() // 60)
    return Finding(subject, count > 0, figures)


def check_stuck_queue(rule: AlertRule, now: datetime) -> list[Finding]:
    """Runs waiting too long: queued (since they were created, or since their last step or
    confirmation when they were queued again: the reaper re-sends queued runs, so their
    heartbeat says nothing), running with no heartbeat (a worker gone and no reaper), or
    awaiting a person's confirmation (since their oldest pending request)."""
    findings = []
    if rule.queued_minutes:
        cutoff = now - timedelta(minutes=rule.queued_minutes)
        last_step = Step.objects.filter(run=OuterRef("pk")).order_by("-index").values("started_at")[:1]
        last_decision = (
            ToolConfirmation.objects.filter(run=OuterRef("pk"), decided_at__isnull=False)
            .order_by("-decided_at")
            .values("decided_at")[:1]
        )
        queued = (
            Run.objects.filter(status=Run.Status.QUEUED, created_at__lt=cutoff)
            .annotate(
                waiting_since=Greatest(
                    "created_at",
                    Coalesce(Subquery(last_step), "created_at"),
                    Coalesce(Subquery(last_decision), "created_at"),
                )
            )
            .filter(waiting_since__lt=cutoff)
        )
        findings.append(_stuck("queued", queued, rule.queued_minutes, now))
    if rule.heartbeat_minutes:
        cutoff = now - timedelta(minutes=rule.heartbeat_minutes)
        running = Run.objects.filter(status=Run.Status.RUNNING).annotate(
            waiting_since=Coalesce("heartbeat_at", "started_at", "created_at")
        )
        findings.append(_stuck("running", running.filter(waiting_since__lt=cutoff), rule.heartbeat_minutes, now))
    if rule.confirmation_minutes:
        cutoff = now - timedelta(minutes=rule.confirmation_minutes)
        oldest_request = (
            ToolConfirmation.objects.filter(run=OuterRef("pk"), status=ToolConfirmation.Status.PENDING)
            .order_by("requested_at")
            .values("requested_at")[:1]
        )
        awaiting = Run.objects.filter(status=Run.Status.AWAITING_CONFIRMATION).annotate(
            waiting_since=Subquery(oldest_request)
        )
        findings.append(
            _stuck("awaiting_confirmation", awaiting.filter(waiting_since__lt=cutoff), rule.confirmation_minutes, now)
        )
    return findings


CHECKS: dict[str, Callable[[AlertRule, datetime], list[Finding]]] = {
    AlertRule.Kind.SCORE_DROP: check_score_drop,
    AlertRule.Kind.ERROR_RATE: check_error_rate,
    AlertRule.Kind.HARMFUL_TRIAL: check_harmful_trial,
    AlertRule.Kind.STUCK_QUEUE: check_stuck_queue,
}


# --- incidents -------------------------------------------------------------------------------
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
            return {"reason": "not_on_trial", "strategy": strategy["pk"], "title": strategy["title"],
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


# --- what a notification says ------------------------------------------------------------------
def _score(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def _percent(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.1f}%"


def _strategy_name(figures: dict) -> str:
    return _("Strategy #%(id)s “%(title)s”") % {"id": figures.get("strategy"), "title": figures.get("title", "")}


STUCK_LABELS = {
    "queued": gettext_lazy("queued runs"),
    "running": gettext_lazy("running runs without a heartbeat"),
    "awaiting_confirmation": gettext_lazy("runs awaiting a confirmation"),
}


def subject_label(incident: AlertIncident) -> str:
    """The subject in words: "all runs", a task kind, a strategy's harm or split, stuck runs."""
    subject, figures = incident.subject, incident.figures
    if subject == "all":
        return _("all runs")
    if subject in Task.Kind.values:
        return str(Task.Kind(subject).label)
    if subject in STUCK_LABELS:
        return str(STUCK_LABELS[subject])
    if subject.endswith("-harm"):
        return _("%(strategy)s: harm") % {"strategy": _strategy_name(figures)}
    if subject.endswith("-split"):
        return _("%(strategy)s: split of runs") % {"strategy": _strategy_name(figures)}
    return subject


def _rate_summary(rule_kind: str, figures: dict) -> str:
    if rule_kind == AlertRule.Kind.SCORE_DROP:
        measure, show = _("Average score"), _score
    elif figures.get("measure") == AlertRule.ErrorMeasure.REPEATED_ERRORS:
        measure, show = _("Repeated-error rate"), _percent
    else:
        measure, show = _("Share of runs with a failed tool call or a failed status"), _percent
    text = _("%(measure)s %(value)s over the last %(minutes)s minutes (%(runs)s runs)") % {
        "measure": measure, "value": show(figures.get("value")), "minutes": figures.get("window_minutes"),
        "runs": figures.get("runs"),
    }  # fmt: skip
    if figures.get("previous_runs"):
        text += _("; %(value)s in the %(minutes)s minutes before (%(runs)s runs)") % {
            "value": show(figures.get("previous_value")), "minutes": figures.get("window_minutes"),
            "runs": figures.get("previous_runs"),
        }  # fmt: skip
    limits = []
    if figures.get("threshold") is not None:
        limits.append(_("threshold %(value)s") % {"value": show(figures["threshold"])})
    if figures.get("change") is not None:
        limits.append(_("change %(value)s") % {"value": show(figures["change"])})
    return f"{text}. " + _("Rule: %(limits)s, judged from %(runs)s runs.") % {
        "limits": ", ".join(limits), "runs": figures.get("min_runs"),
    }  # fmt: skip


def _trial_summary(subject: str, figures: dict) -> str:
    name = _strategy_name(figures)
    if subject.endswith("-split"):
        return _(
            "%(strategy)s: %(treatment)s runs in the treatment and %(control)s in the control at a treatment "
            "share of %(fraction)s (sample-ratio mismatch test p = %(p)s; flagged below 0.01)."
        ) % {"strategy": name, "treatment": figures.get("treatment"), "control": figures.get("control"),
             "fraction": _score(figures.get("fraction")), "p": f"{figures.get('p_value', 1):.2g}"}  # fmt: skip
    if figures.get("ci_low") is None:
        text = _("%(strategy)s: no interval yet (%(treatment)s/%(control)s scored runs).")
    else:
        text = _(
            "%(strategy)s: treatment scores %(difference)s against the control (always-valid 95%% interval "
            "%(low)s to %(high)s, %(treatment)s/%(control)s scored runs)."
        )
    text %= {"strategy": name, "difference": f"{figures.get('difference') or 0:+.3f}",
             "low": f"{figures.get('ci_low') or 0:+.3f}", "high": f"{figures.get('ci_high') or 0:+.3f}",
             "treatment": figures.get("treatment_n"), "control": figures.get("control_n")}  # fmt: skip
    worse = [str(GUARD_LABELS[name]) for name in figures.get("worse_counter_metrics", []) if name in GUARD_LABELS]
    if worse:
        text += " " + _("Significantly worse in the treatment: %(metrics)s.") % {"metrics": ", ".join(worse)}
    return text


STUCK_TEXTS = {
    "queued": (
        lambda n: ngettext(
            "%(count)d run queued longer than %(minutes)d minutes",
            "%(count)d runs queued longer than %(minutes)d minutes",
            n,
        ),
        gettext_lazy("No run queued longer than %(minutes)d minutes."),
    ),
    "running": (
        lambda n: ngettext(
            "%(count)d run running with no heartbeat for %(minutes)d minutes",
            "%(count)d runs running with no heartbeat for %(minutes)d minutes",
            n,
        ),
        gettext_lazy("No run running with no heartbeat for %(minutes)d minutes."),
    ),
    "awaiting_confirmation": (
        lambda n: ngettext(
            "%(count)d run awaiting a confirmation longer than %(minutes)d minutes",
            "%(count)d runs awaiting a confirmation longer than %(minutes)d minutes",
            n,
        ),
        gettext_lazy("No run awaiting a confirmation longer than %(minutes)d minutes."),
    ),
}


def _stuck_summary(subject: str, figures: dict) -> str:
    some, none = STUCK_TEXTS[subject]
    count, minutes = figures.get("runs") or 0, figures.get("limit_minutes") or 0
    if not count:
        return str(none) % {"minutes": minutes}
    return (
        (some(count) % {"count": count, "minutes": minutes})
        + "; "
        + _("the oldest, run #%(run)s, for %(age)s minutes.")
        % {"run": figures.get("oldest_run"), "age": figures.get("oldest_minutes")}
    )


def summary(incident: AlertIncident, *, resolved: bool = False) -> str:
    """What was measured when the incident opened (or, ``resolved``, when it resolved), in words."""
    figures = incident.resolved_figures if resolved else incident.figures
    reason = figures.get("reason")
    if reason == "rule_disabled":
        return _("The rule was disabled.")
    if reason == "not_on_trial":
        return _("%(strategy)s is no longer on trial (%(status)s).") % {
            "strategy": _strategy_name(figures), "status": figures.get("status"),
        }  # fmt: skip
    if reason == "not_watched":
        return _("The rule no longer watches this subject.")
    kind = incident.rule.kind
    if kind == AlertRule.Kind.HARMFUL_TRIAL:
        return _trial_summary(incident.subject, figures)
    if kind == AlertRule.Kind.STUCK_QUEUE:
        return _stuck_summary(incident.subject, figures)
    return _rate_summary(kind, figures)


def rule_condition(rule: AlertRule) -> str:
    """A rule's condition and parameters, in words (the rules page)."""
    if rule.kind == AlertRule.Kind.HARMFUL_TRIAL:
        return _(
            "A strategy on trial whose treatment is significantly worse (scores or a counter-metric), or whose "
            "split of runs is mismatched; judged from %(runs)s assigned runs."
        ) % {"runs": rule.min_runs}
    if rule.kind == AlertRule.Kind.STUCK_QUEUE:
        waits = [
            (rule.queued_minutes, gettext_lazy("queued longer than %(minutes)s minutes")),
            (rule.heartbeat_minutes, gettext_lazy("running with no heartbeat for %(minutes)s minutes")),
            (rule.confirmation_minutes, gettext_lazy("awaiting a confirmation longer than %(minutes)s minutes")),
        ]
        return "; ".join(str(text) % {"minutes": minutes} for minutes, text in waits if minutes)
    score = rule.kind == AlertRule.Kind.SCORE_DROP
    parts = [] if score else [str(rule.get_error_measure_display())]
    parts += [str(rule.get_task_kind_display()), _("the last %(minutes)s minutes") % {"minutes": rule.window_minutes}]
    if rule.threshold is not None:
        parts.append((_("below %(value)s") if score else _("above %(value)s")) % {"value": f"{rule.threshold:g}"})
    if rule.change is not None:
        dropped = _("dropped by %(value)s against the window before")
        risen = _("risen by %(value)s against the window before")
        parts.append((dropped if score else risen) % {"value": f"{rule.change:g}"})
    parts.append(_("judged from %(runs)s runs") % {"runs": rule.min_runs})
    return "; ".join(parts)


def dashboard_path(incident: AlertIncident) -> str:
    """The page to look at for this incident."""
    subject, kind = incident.subject, incident.rule.kind
    if kind == AlertRule.Kind.HARMFUL_TRIAL:
        return reverse("feedback-strategy-detail", args=[incident.figures["strategy"]])
    if subject == "awaiting_confirmation":
        return reverse("feedback-confirmation-list")
    if subject in STUCK_LABELS:
        return reverse("feedback-run-list") + "?" + urlencode({"status": subject})
    return reverse("feedback-metrics") + "?" + urlencode({"days": 7, **({"kind": subject} if subject != "all" else {})})


def history_path(incident: AlertIncident) -> str:
    return reverse("feedback-alert-list") + f"?rule={incident.rule_id}#incident-{incident.pk}"


def notification(delivery: AlertDelivery) -> dict:
    """The webhook's JSON body; the same at every attempt of the delivery (its ``delivery`` id is
    what a receiver deduplicates by)."""
    incident = delivery.incident
    rule = incident.rule
    resolved = delivery.event == AlertDelivery.Event.RESOLVE
    with translation.override(settings.LANGUAGE_CODE):
        return {
            "delivery": delivery.pk,
            "state": AlertIncident.State.RESOLVED.value if resolved else AlertIncident.State.OPEN.value,
            "rule": {"id": rule.pk, "name": rule.name, "kind": rule.kind},
            "subject": incident.subject,
            "subject_label": subject_label(incident),
            "incident": {
                "id": incident.pk,
                "opened_at": incident.opened_at.isoformat(),
                "resolved_at": incident.resolved_at.isoformat() if resolved and incident.resolved_at else None,
            },
            "summary": summary(incident, resolved=resolved),
            "figures": incident.resolved_figures if resolved else incident.figures,
            "url": settings.SITE_URL + dashboard_path(incident),
            "history_url": settings.SITE_URL + history_path(incident),
        }


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """The ``X-Feedback-Signature`` header: HMAC-SHA256 of "<timestamp>.<body>" with the rule's secret."""
    return "sha256=" + hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()


# --- delivery --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Sent:
    ok: bool
    retryable: bool = False
    status_code: int | None = None
    error: str = ""


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    # A redirected POST would arrive as a GET without its body: a receiver's 3xx is its mistake.
    def redirect_request(self, *args, **kwargs) -> None:
        return None


_opener = urllib.request.build_opener(_NoRedirects)


def send_webhook(delivery: AlertDelivery) -> Sent:
    body = json.dumps(notification(delivery), ensure_ascii=False, separators=(",", ":")).encode()
    timestamp = str(int(time.time()))
    request = urllib.request.Request(
        delivery.target,
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "User-Agent": "agent-feedback-alerts/1",
            "X-Feedback-Event": f"alert.{delivery.event}",
            "X-Feedback-Delivery": str(delivery.pk),
            TIMESTAMP_HEADER: timestamp,
            SIGNATURE_HEADER: signature(delivery.incident.rule.secret, timestamp, body),
        },
    )
    timeout = settings.ALERT_DELIVERY_TIMEOUT_SECONDS
    try:
        with _opener.open(request, timeout=timeout) as answer:
            answer.read(ANSWER_READ_BYTES)
            return Sent(ok=True, status_code=answer.status)
    except urllib.error.HTTPError as exc:
        return Sent(ok=False, retryable=exc.code >= 500, status_code=exc.code, error=f"HTTP {exc.code} {exc.reason}")
    except TimeoutError:
        return Sent(ok=False, retryable=True, error=f"no answer within {timeout:g} s")
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, TimeoutError):
            return Sent(ok=False, retryable=True, error=f"no answer within {timeout:g} s")
        # An address that cannot be reached may be a receiver restarting; a malformed one will not mend.
        return Sent(ok=False, retryable=isinstance(exc.reason, OSError), error=str(exc.reason))
    except (OSError, http.client.HTTPException) as exc:
        return Sent(ok=False, retryable=True, error=f"{type(exc).__name__}: {exc}")


def email_message(delivery: AlertDelivery) -> tuple[str, str]:
    """The subject and plain-text body of an alert's email."""
    payload = notification(delivery)
    incident = delivery.incident
    with translation.override(settings.LANGUAGE_CODE):
        # Each label through gettext on its own (not inside an f-string, where makemessages
        # cannot find it).
        label = {
            "alert": _("Alert"), "rule": _("Rule"), "subject": _("Subject"), "opened": _("Opened"),
            "resolved": _("Resolved"), "look": _("Look"), "history": _("History"),
        }  # fmt: skip
        state = label["resolved"] if payload["state"] == "resolved" else _("Open")
        subject = f"[{label['alert']} {state}] {payload['rule']['name']}: {payload['subject_label']}"
        lines = [
            payload["summary"],
            "",
            f"{label['rule']}: {payload['rule']['name']} ({incident.rule.get_kind_display()})",
            f"{label['subject']}: {payload['subject_label']}",
            f"{label['opened']}: {incident.opened_at:%Y-%m-%d %H:%M:%S %Z}",
        ]
        if payload["incident"]["resolved_at"]:
            lines.append(f"{label['resolved']}: {incident.resolved_at:%Y-%m-%d %H:%M:%S %Z}")
        lines += ["", f"{label['look']}: {payload['url']}", f"{label['history']}: {payload['history_url']}", "",
                  json.dumps(payload["figures"], indent=2, ensure_ascii=False)]  # fmt: skip
    # One line, whatever a rule's name holds: a newline would end the header.
    return " ".join(subject.split()), "\n".join(lines)


def send_email(delivery: AlertDelivery) -> Sent:
    subject, body = email_message(delivery)
    timeout = settings.ALERT_DELIVERY_TIMEOUT_SECONDS
    message = EmailMessage(
        subject,
        body,
        settings.DEFAULT_FROM_EMAIL,
        [delivery.target],
        headers={"X-Feedback-Delivery": str(delivery.pk)},
        connection=get_connection(fail_silently=False, timeout=timeout),
    )
    try:
        message.send()
    except smtplib.SMTPServerDisconnected as exc:
        return Sent(ok=False, retryable=True, error=f"SMTPServerDisconnected: {exc}")
    except smtplib.SMTPResponseException as exc:
        # 4xx: the server is busy or greylisting; 5xx: it refuses for good.
        code = exc.smtp_code
        return Sent(ok=False, retryable=400 <= code < 500, status_code=code, error=f"SMTP {code}: {exc.smtp_error!r}")
    except smtplib.SMTPException as exc:
        return Sent(ok=False, error=f"{type(exc).__name__}: {exc}")
    except OSError as exc:  # no mail server there, a timeout
        return Sent(ok=False, retryable=True, error=f"{type(exc).__name__}: {exc}")
    return Sent(ok=True)


SENDERS: dict[str, Callable[[AlertDelivery], Sent]] = {
    AlertDelivery.Channel.WEBHOOK: send_webhook,
    AlertDelivery.Channel.EMAIL: send_email,
}


def retry_wait(attempt: int) -> float:
    """Seconds before the attempt after ``attempt``: the backoff, doubling."""
    return settings.ALERT_RETRY_BACKOFF_SECONDS * 2 ** (attempt - 1)


def alert_deliver(*, delivery_id: int) -> AlertAttempt | None:
    """Make the next attempt of a pending notification, record it, and queue the one after when
    it failed for a reason that may pass. None when there was nothing to do: delivered, given up,
    or taken by another worker (a duplicate message)."""
    now = timezone.now()
    hold = timedelta(seconds=settings.ALERT_DELIVERY_TIMEOUT_SECONDS + CLAIM_MARGIN_SECONDS)
    claimed = AlertDelivery.objects.filter(
        pk=delivery_id,
        status=AlertDelivery.Status.PENDING,
        next_attempt_at__lte=now + CLOCK_SLACK,
        attempts__lt=settings.ALERT_DELIVERY_MAX_ATTEMPTS,
    ).update(next_attempt_at=now + hold, attempts=F("attempts") + 1)
    if not claimed:
        return None
    delivery = AlertDelivery.objects.select_related("incident__rule").get(pk=delivery_id)
    started, clock = timezone.now(), time.monotonic()
    try:
        sent = SENDERS[delivery.channel](delivery)
    except Exception as exc:
        # Our own mistake, not the receiver's: recorded on the history page, not retried.
        logger.exception("alert delivery %s could not be sent", delivery.pk)
        sent = Sent(ok=False, error=f"{type(exc).__name__}: {exc}")
    duration_ms = int((time.monotonic() - clock) * 1000)
    again = sent.retryable and delivery.attempts < settings.ALERT_DELIVERY_MAX_ATTEMPTS
    with transaction.atomic():
        if sent.ok:
            outcome, fields = AlertAttempt.Outcome.DELIVERED, {"status": AlertDelivery.Status.DELIVERED,
                                                               "delivered_at": timezone.now()}  # fmt: skip
        elif again:
            wait = retry_wait(delivery.attempts)
            outcome, fields = AlertAttempt.Outcome.RETRY, {"next_attempt_at": timezone.now() + timedelta(seconds=wait)}
            queue.alert_deliver(delivery.pk, countdown=wait)
        else:
            outcome, fields = AlertAttempt.Outcome.FAILED, {"status": AlertDelivery.Status.FAILED}
        AlertDelivery.objects.filter(pk=delivery.pk).update(**fields)
        if not sent.ok:
            logger.warning("alert delivery %s attempt %s: %s", delivery.pk, delivery.attempts, sent.error)
        return AlertAttempt.objects.create(
            delivery=delivery, number=delivery.attempts, started_at=started, duration_ms=duration_ms,
            status_code=sent.status_code, outcome=outcome, error=sent.error[:2000],
        )  # fmt: skip


def alert_deliveries_resend() -> list[int]:
    """Queue again the notifications whose attempt is overdue: their message was lost (a broker
    down when it was queued, a worker killed mid-attempt). Moving ``next_attempt_at`` first means
    each is queued once per RESEND_AFTER however many beats look."""
    now = timezone.now()  # the workers' clock, which claims compare with
    overdue = AlertDelivery.objects.filter(status=AlertDelivery.Status.PENDING, next_attempt_at__lt=now - RESEND_AFTER)
    # Its last attempt was cut short (a worker killed during it): no attempt is left to make.
    overdue.filter(attempts__gte=settings.ALERT_DELIVERY_MAX_ATTEMPTS).update(status=AlertDelivery.Status.FAILED)
    resent = []
    for delivery_id, due in overdue.values_list("pk", "next_attempt_at")[:500]:
        with transaction.atomic():
            if AlertDelivery.objects.filter(pk=delivery_id, next_attempt_at=due).update(next_attempt_at=now):
                queue.alert_deliver(delivery_id)
                resent.append(delivery_id)
    return resent


def redacted(url: str) -> str:
    """A webhook URL as pages show it: its scheme and host (the path of many webhook services, Slack's
    and Teams', is itself the secret)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}/…"
