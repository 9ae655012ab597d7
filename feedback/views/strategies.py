"""The reviewer's pages: strategies, their evidence and trial, and every decision on them."""

import json

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.core.cache import cache
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import dateformat, timezone
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST
from kombu.exceptions import OperationalError as BrokerError

from feedback import locks, queue, selectors
from feedback.agent.guardrails import check_guardrails
from feedback.forms import MiningScheduleForm, StrategyDecisionForm, StrategyEditForm
from feedback.models import DatasetVersion, Strategy, StrategyEvent, StrategyVersion
from feedback.strategies import hindsight, insights, schedule, services
from feedback.strategies.conditions import check_condition
from feedback.strategies.demo_report import DEMO_REPORT_KEY, figure_rows
from feedback.strategies.trials import trial_stats
from feedback.strategies.verdicts import promotion_verdict
from feedback.strategies.watch import watch_stats

DECIDED_ON_FIGURES = (
    StrategyEvent.Action.PROMOTE,
    StrategyEvent.Action.PROMOTE_OVERRIDE,
    StrategyEvent.Action.ROLL_BACK,
    StrategyEvent.Action.AUTO_ROLL_BACK,
)


def _require_decider(request: HttpRequest) -> None:
    if not request.user.has_perm("feedback.decide_strategy"):
        raise PermissionDenied


@permission_required("feedback.view_strategy", raise_exception=True)
def strategy_list(request: HttpRequest) -> HttpResponse:
    status = request.GET.get("status", "")
    status = status if status in Strategy.Status.values else ""
    kind = request.GET.get("kind", "")
    kind = kind if kind in Strategy.PatternKind.values else ""
    context = {
        "strategies": selectors.strategy_list(status=status, kind=kind),
        "status": status,
        "statuses": Strategy.Status.choices,
        "kind": kind,
        "kinds": Strategy.PatternKind.choices,
        "schedule_form": MiningScheduleForm(initial={"every_minutes": schedule.mining_every_minutes()}),
        "demo_available": settings.EMBEDDED_DATABASE,
        "demo_running": locks.job_lock_held(locks.DEMO_LOOP) if settings.EMBEDDED_DATABASE else None,
        "demo_report": cache.get(DEMO_REPORT_KEY),
    }
    return render(request, "feedback/strategy_list.html", context)


@permission_required("feedback.view_strategy", raise_exception=True)
def strategies_demo_report(request: HttpRequest) -> HttpResponse:
    """The last demo loop's report: what was live in each phase, every trial's end, the figures."""
    report = cache.get(DEMO_REPORT_KEY)
    if report:
        report = {**report, "figure_rows": figure_rows(report.get("figures") or {})}
    return render(request, "feedback/demo_loop_report.html", {"report": report})


def _detail_context(
    strategy: Strategy, *, edit_form: StrategyEditForm | None, insights_version: int | None = None
) -> dict:
    """What the review page shows; ``edit_form`` is None where the strategy cannot be edited;
    ``insights_version``: the version whose insight changes are shown (default: the one in use)."""
    pending = insights.pending_version(strategy)
    evidence = hindsight.evidence_hindsight(
        strategy, list(strategy.evidence.select_related("task__workspace").order_by("-pk")[:50])
    )
    trial = trial_stats(strategy) if strategy.trial_started_at else None
    return {
        "strategy": strategy,
        "version": strategy.current_version,
        "versions": strategy.versions.select_related("author").order_by("-number"),
        "events": strategy.events.select_related("actor").order_by("-created_at", "-id"),
        "evidence": evidence,
        "hindsight": hindsight.tally(evidence),
        "diff": selectors.strategy_prompt_diff(strategy),
        "trial": trial,
        # What promoting now would follow, and the last decision's frozen figures beside the live ones.
        "verdict": promotion_verdict(strategy, stats=trial)
        if strategy.status in (Strategy.Status.TRIAL, Strategy.Status.EXPERIMENT)
        else None,
        "experiments": strategy.experiments.order_by("-created_at", "-pk"),
        "dataset_versions": DatasetVersion.objects.select_related("dataset").order_by("dataset__name", "-number")
        if strategy.status == Strategy.Status.PROPOSED
        else [],
        "decided": _last_decision(strategy),
        "watch": watch_stats(strategy) if strategy.status == Strategy.Status.ACTIVE else None,
        "decision_form": StrategyDecisionForm(initial={"trial_fraction": strategy.trial_fraction}),
        "edit_form": edit_form,
        # A regex saved before RE2 checked it (feedback/saferegex.py) may not run: say so here.
        "unusable": _unusable(strategy.current_version),
        "insight_changes": selectors.insight_changes(strategy, insights_version) or selectors.insight_changes(strategy),
        "pending": pending,
        "pending_changes": selectors.insight_changes(strategy, pending.number) if pending else None,
    }


def _last_decision(strategy: Strategy) -> StrategyEvent | None:
    """The latest decision taken on the trial's figures (they are frozen in its audit event)."""
    decisions = strategy.events.filter(action__in=DECIDED_ON_FIGURES).select_related("actor")
    return next((e for e in decisions.order_by("-created_at", "-id") if e.snapshot.get("trial")), None)


def _unusable(version: StrategyVersion | None) -> list[str]:
    if version is None:
        return []
    return check_condition(version.condition) + check_guardrails(version.guardrails)


@permission_required("feedback.view_strategy", raise_exception=True)
def strategy_detail(request: HttpRequest, strategy_id: int) -> HttpResponse:
    strategy = selectors.strategy_detail(strategy_id)
    version = strategy.current_version
    edit_form = None
    if version is not None and strategy.editable:
        initial = {f: getattr(version, f) for f in services.EDITABLE_FIELDS}
        initial["title"] = version.title or strategy.title
        initial |= {
            f: json.dumps(getattr(version, f), indent=2, ensure_ascii=False) for f in ("condition", "guardrails")
        }
        edit_form = StrategyEditForm(initial=initial)
    number = request.GET.get("insights_version", "")
    number = int(number) if number.isascii() and number.isdecimal() else None
    context = _detail_context(strategy, edit_form=edit_form, insights_version=number)
    if request.htmx and "insights_version" in request.GET:
        # One version's insight changes, for the version links of the insight list.
        context["changes"] = selectors.insight_changes(strategy, number) if number is not None else None
        return render(request, "feedback/strategy_detail.html#insight-changes", context)
    return render(request, "feedback/strategy_detail.html", context)


@require_POST
def strategy_decide(request: HttpRequest, strategy_id: int) -> HttpResponse:
    _require_decider(request)
    strategy = selectors.strategy_detail(strategy_id)
    form = StrategyDecisionForm(request.POST)
    if not form.is_valid():
        for errors in form.errors.values():
            messages.error(request, " ".join(errors))
        return redirect("feedback-strategy-detail", strategy_id=strategy.pk)
    try:
        services.strategy_decide(strategy=strategy, reviewer=request.user, **form.cleaned_data)
    except services.IllegalTransition as exc:
        messages.warning(request, str(exc))
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        strategy.refresh_from_db()
        messages.success(request, _("Strategy #%(id)s is now %(status)s.") % {
            "id": strategy.pk, "status": strategy.get_status_display().lower()})  # fmt: skip
    return redirect("feedback-strategy-detail", strategy_id=strategy.pk)


@require_POST
def strategy_adopt_version(request: HttpRequest, strategy_id: int) -> HttpResponse:
    """A reviewer makes a newer version (an insight list's update) the one in use, with a reason."""
    _require_decider(request)
    strategy = selectors.strategy_detail(strategy_id)
    number = request.POST.get("number", "")
    try:
        if not (number.isascii() and number.isdecimal()):
            raise ValidationError(_("Say which version to adopt."))
        services.strategy_version_adopt(
            strategy=strategy, number=int(number), reviewer=request.user, reason=request.POST.get("reason", "")[:2000]
        )
    except services.IllegalTransition as exc:
        messages.warning(request, str(exc))
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        messages.success(request, _("Version %(n)s is now in use.") % {"n": number})
    return redirect("feedback-strategy-detail", strategy_id=strategy.pk)


@require_POST
def strategy_roll_back_harm(request: HttpRequest, strategy_id: int) -> HttpResponse:
    """One click from the harmful-active-strategy alert or the strategy page: roll back an active
    strategy its watch shows to do harm, with the figures as the reason."""
    _require_decider(request)
    strategy = selectors.strategy_detail(strategy_id)
    try:
        services.strategy_roll_back_harmful(strategy=strategy, reviewer=request.user)
    except services.IllegalTransition as exc:
        messages.warning(request, str(exc))
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        messages.success(request, _("Strategy #%(id)s is rolled back.") % {"id": strategy.pk})
    return redirect("feedback-strategy-detail", strategy_id=strategy.pk)


@require_POST
def strategy_edit(request: HttpRequest, strategy_id: int) -> HttpResponse:
    _require_decider(request)
    strategy = selectors.strategy_detail(strategy_id)
    form = StrategyEditForm(request.POST)
    if form.is_valid():
        content = {f: form.cleaned_data[f] for f in services.EDITABLE_FIELDS}
        try:
            version = services.strategy_edit(
                strategy=strategy, editor=request.user, reason=form.cleaned_data["reason"], **content
            )
        except (services.IllegalTransition, ValidationError) as exc:
            messages.error(request, str(exc) if isinstance(exc, services.IllegalTransition) else " ".join(exc.messages))
        else:
            messages.success(request, _("Saved as version %(n)s.") % {"n": version.number})
            return redirect("feedback-strategy-detail", strategy_id=strategy.pk)
    # Invalid: show the page again with what was typed and the errors, nothing lost.
    return render(request, "feedback/strategy_detail.html", _detail_context(strategy, edit_form=form), status=400)


@require_POST
def strategies_mine(request: HttpRequest) -> HttpResponse:
    _require_decider(request)
    queue.strategies_mine()  # over STRATEGY_MINING_WINDOW_DAYS, as beat's hourly job
    messages.success(
        request,
        _("Mining the last %(days)s days started: new proposals appear here when it is done.")
        % {"days": settings.STRATEGY_MINING_WINDOW_DAYS},
    )
    return redirect("feedback-strategy-list")


@require_POST
def strategies_schedule(request: HttpRequest) -> HttpResponse:
    _require_decider(request)
    form = MiningScheduleForm(request.POST)
    if form.is_valid():
        schedule.set_mining_every_minutes(form.cleaned_data["every_minutes"])
        messages.success(
            request, _("Mining now runs every %(n)s minute(s).") % {"n": form.cleaned_data["every_minutes"]}
        )
    else:
        messages.error(request, _("Give a number of minutes between 1 and 10080."))
    return redirect("feedback-strategy-list")


@require_POST
def strategies_demo_loop(request: HttpRequest) -> HttpResponse:
    _require_decider(request)
    if not settings.EMBEDDED_DATABASE:
        raise PermissionDenied(_("The demo loop adds hundreds of runs: embedded demo only."))
    # One loop at a time, whoever clicks and however often: the lock is the database's, taken
    # here and released by the loop when it ends.
    lock = locks.job_lock_acquire(name=locks.DEMO_LOOP, seconds=locks.DEMO_LOOP_SECONDS, user=request.user)
    if lock is None:
        held = locks.job_lock_held(locks.DEMO_LOOP)
        started = dateformat.format(timezone.localtime(held.acquired_at if held else None), "Y-m-d H:i:s")
        messages.info(request, _("A demo loop is already running, started at %(time)s: nothing new was queued. "
                                 "Its figures appear here when it ends.") % {"time": started})  # fmt: skip
        return redirect("feedback-strategy-list")
    try:
        queue.demo_loop(tasks_per_phase=60, lock_token=lock.token)
    except (BrokerError, OSError):
        locks.job_lock_release(name=locks.DEMO_LOOP, token=lock.token)
        messages.error(request, _("The worker's queue cannot be reached: no demo loop was started. Try again shortly."))
        return redirect("feedback-strategy-list")
    messages.success(request, _("The demo loop is running in the worker (about a minute); its figures appear here."))
    return redirect("feedback-strategy-list")
