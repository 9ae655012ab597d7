"""What a notification says: an incident's subject and figures in words, the webhook's body, its signature."""

import hashlib
import hmac
from urllib.parse import urlencode

from django.conf import settings
from django.urls import reverse
from django.utils import translation
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from feedback.models import AlertDelivery, AlertIncident, AlertRule, Task
from feedback.strategies.trials import GUARD_LABELS
from feedback.strategies.watch import WATCHED


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
    if subject.endswith("-active"):
        return _("%(strategy)s: harm since its promotion") % {"strategy": _strategy_name(figures)}
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


def _active_summary(figures: dict) -> str:
    text = _("%(strategy)s: %(runs)s runs since its promotion against %(baseline)s of its trial.") % {
        "strategy": _strategy_name(figures),
        "runs": figures.get("runs"),
        "baseline": figures.get("baseline_runs"),
    }
    worse = []
    for name in figures.get("worse", []):
        shown = (figures.get("figures") or {}).get(name, {})
        label = WATCHED[name][0] if name in WATCHED else name
        now, before = (_score((shown.get(side) or {}).get("mean")) for side in ("active", "baseline"))
        worse.append(_("%(figure)s %(now)s against %(before)s") % {"figure": label, "now": now, "before": before})
    if worse:
        text += " " + _("Significantly worse: %(figures)s.") % {"figures": "; ".join(worse)}
    if figures.get("override"):
        text += " " + _("It was promoted against its verdict, by an override.")
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
    if reason == "not_active":
        return _("%(strategy)s is no longer active (%(status)s).") % {
            "strategy": _strategy_name(figures),
            "status": figures.get("status"),
        }
    if reason == "not_watched":
        return _("The rule no longer watches this subject.")
    kind = incident.rule.kind
    if kind == AlertRule.Kind.HARMFUL_TRIAL:
        return _trial_summary(incident.subject, figures)
    if kind == AlertRule.Kind.HARMFUL_ACTIVE:
        return _active_summary(figures)
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
    if rule.kind == AlertRule.Kind.HARMFUL_ACTIVE:
        return _(
            "An active strategy whose runs since its promotion are significantly worse than its trial's before it "
            "(score, accomplished rate, answers quoting a guardrail, guardrail refusals); judged from %(runs)s runs "
            "since the promotion."
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
    if kind in (AlertRule.Kind.HARMFUL_TRIAL, AlertRule.Kind.HARMFUL_ACTIVE):
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
