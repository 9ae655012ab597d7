"""The conditions: each kind of rule evaluated into findings, one per subject it watches."""

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count, Exists, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce, Greatest

from feedback import metrics
from feedback.metrics import Window
from feedback.models import AlertRule, Run, Step, Strategy, Task, ToolConfirmation
from feedback.strategies.trials import error_steps, trial_stats
from feedback.strategies.watch import watch_stats

# Stuck runs named in an incident's figures (the count covers them all).
STUCK_LISTED = 10


@dataclass(frozen=True)
class Finding:
    subject: str
    holds: bool | None  # None: too few runs to judge; the incident's state stays as it is
    figures: dict


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
    """Of the window's finished runs (answered or failed), those with an error (the metrics' one
    definition: a refusal is none) or a failed status: the trials' error-rate counter-metric."""
    row = (
        window.runs()
        .filter(status__in=[Run.Status.SUCCEEDED, Run.Status.FAILED])
        .annotate(had_error=Exists(error_steps(OuterRef("pk"))))
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


def check_harmful_active(rule: AlertRule, now: datetime) -> list[Finding]:
    """Per active strategy, by its watch (strategies/watch.py): harm, when the runs it was applied
    to since its promotion are significantly worse than its trial's before it (score, accomplished
    rate, answers quoting a guardrail, guardrail refusals). Judged once ``min_runs`` runs had it
    since its promotion."""
    findings = []
    for strategy in Strategy.objects.filter(status=Strategy.Status.ACTIVE).order_by("pk"):
        watch = watch_stats(strategy)
        figures = {
            "strategy": strategy.pk,
            "title": strategy.title,
            "override": strategy.promoted_by_override,
            "min_runs": rule.min_runs,
            **watch.as_json(),
        }
        judged = watch.runs >= rule.min_runs
        findings.append(Finding(f"strategy-{strategy.pk}-active", watch.harmed if judged else None, figures))
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
    AlertRule.Kind.HARMFUL_ACTIVE: check_harmful_active,
    AlertRule.Kind.STUCK_QUEUE: check_stuck_queue,
}
