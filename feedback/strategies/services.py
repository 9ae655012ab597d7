"""The strategy lifecycle: every state change people (or the system) trigger.

proposed --experiment--> experiment --approve--> trial --promote--> active --roll back--> rolled_back
    \\--approve (no dataset)-------------/     \\--roll back (a reviewer, or automatically on harm)
    \\--reject--> rejected  <--reject-- experiment

A paired experiment (feedback/experiments/services.py) starts and ends the experiment stage; its
verdict is frozen into the approval's audit event. A strategy whose experiment is still running
is not approved (wait for its verdict, or stop it).

Each function locks the strategy row, checks the transition against Strategy.TRANSITIONS, and
writes one audit event with the content at that moment and the figures it was decided on (the
trial's, and for an active strategy its watch since promotion), frozen. Two reviewers acting at
once are serialised by the lock: the second sees the first one's result. Every decision needs a
reason.

**Safe promotion** (verdicts.py): ``strategy_promote`` promotes only when the verdict says
"promote". Against any other verdict a reviewer may promote only by ``strategy_promote_override``,
a distinct action with its own reason, recorded as such in the audit (``promote_override``) and
on the strategy (``promoted_by_override``); never against a verdict of significant harm. A block
by a counter-metric or a mismatched split is a verdict against promotion like any other: a real
worsening keeps blocking, and overriding it is a person's explicit, recorded choice.
"""

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from feedback.agent.guardrails import check_guardrails
from feedback.models import Strategy, StrategyEvent, StrategyVersion
from feedback.models.strategy import NO_CONTENT
from feedback.storable import unstorable

from .conditions import check_condition
from .injection import strategies_changed
from .trials import trial_stats
from .verdicts import promotion_verdict
from .watch import watch_stats

_PAST = {
    "approve": "approved",
    "experiment": "sent to an experiment",
    "reject": "rejected",
    "promote": "promoted",
    "promote_override": "promoted",
    "roll_back": "rolled back",
    "auto_roll_back": "rolled back",
}


class IllegalTransition(Exception):
    """The strategy is not in a state that allows this action (maybe someone acted first)."""


def _require(user: AbstractBaseUser | None) -> None:
    if user is not None and not user.has_perm("feedback.decide_strategy"):
        raise PermissionDenied


def _require_reason(reason: str) -> None:
    if not reason.strip():
        raise ValidationError(_("Say why: every decision on a strategy needs a reason."))


def _record(strategy: Strategy) -> dict:
    """The figures at the moment of a decision, for its audit event: the trial's, and an active
    strategy's watch since its promotion."""
    record = {"trial": trial_stats(strategy).as_json() if strategy.trial_started_at else {}}
    if strategy.status == Strategy.Status.ACTIVE:
        record["watch"] = watch_stats(strategy).as_json()
    return record


def strategy_event_record(
    *,
    strategy: Strategy,
    action: str,
    actor,
    reason: str,
    from_status: str,
    version: StrategyVersion | None = None,
    **extra,
) -> StrategyEvent:
    """A strategy's audit event: who moved it from ``from_status`` to its status now, why, and its
    content at that moment (``version``, its current one unless another is named: an update that
    waits for adoption) with ``extra`` (the figures it was decided on), frozen. Every change of a
    strategy's status or content writes one (here, in experiments/services.py and insights.py)."""
    version = version or strategy.current_version
    return StrategyEvent.objects.create(
        strategy=strategy,
        version=version,
        action=action,
        from_status=from_status,
        to_status=strategy.status,
        actor=actor,
        reason=reason,
        snapshot={**(version.snapshot() if version else {}), **extra},
    )


def _transition(strategy_id: int, to: str, action: str, actor, reason: str, check=None, **extra) -> Strategy:
    """``check(strategy)``, called under the lock, may refuse the move or add to the audit record."""
    with transaction.atomic():
        # No join in the locking query: after waiting for the lock, PostgreSQL re-reads the locked
        # row but not a joined one, so a version created meanwhile would look missing.
        strategy = Strategy.objects.select_for_update().get(pk=strategy_id)
        if not strategy.can_move_to(to):
            raise IllegalTransition(
                f"A strategy that is {strategy.get_status_display().lower()} cannot be {_PAST[action]}."
            )
        if check is not None:
            extra |= check(strategy)
        before = strategy.status
        strategy.status = to
        if to == Strategy.Status.TRIAL:
            strategy.trial_started_at = timezone.now()
        if to == Strategy.Status.ACTIVE:
            strategy.promoted_at = timezone.now()
            strategy.promoted_by_override = action == StrategyEvent.Action.PROMOTE_OVERRIDE
        strategy.save(update_fields=["status", "trial_started_at", "promoted_at", "promoted_by_override", "updated_at"])
        strategy_event_record(strategy=strategy, action=action, actor=actor, reason=reason, from_status=before, **extra)
    return strategy


def strategy_approve(
    *, strategy: Strategy, reviewer: AbstractBaseUser | None, reason: str, trial_fraction: float | None = None
) -> Strategy:
    """Send a proposal to a controlled trial (``reviewer`` None: the opt-in autonomy)."""
    _require(reviewer)
    _require_reason(reason)
    if trial_fraction is not None:
        if not 0 < trial_fraction < 1:
            raise ValidationError("The trial fraction must be between 0 and 1 (exclusive).")
        Strategy.objects.filter(
            pk=strategy.pk, status__in=[Strategy.Status.PROPOSED, Strategy.Status.EXPERIMENT]
        ).update(trial_fraction=trial_fraction)
        strategies_changed()

    def after_its_experiment(locked: Strategy) -> dict:
        if locked.status != Strategy.Status.EXPERIMENT:
            return {}
        verdict = promotion_verdict(locked)
        if verdict.figures.get("running"):
            raise ValidationError(_("Its paired experiment is still running: wait for its verdict, or stop it."))
        return {"experiment": verdict.figures, "verdict": verdict.as_json()}

    return _transition(
        strategy.pk, Strategy.Status.TRIAL, StrategyEvent.Action.APPROVE, reviewer, reason, after_its_experiment
    )


def strategy_reject(*, strategy: Strategy, reviewer: AbstractBaseUser, reason: str) -> Strategy:
    _require(reviewer)
    _require_reason(reason)
    rejected = _transition(strategy.pk, Strategy.Status.REJECTED, StrategyEvent.Action.REJECT, reviewer, reason)
    from feedback.experiments.services import experiments_stop_for  # late: experiments read strategies

    experiments_stop_for(strategy=rejected, by=reviewer)  # a rejected change needs no more pairs
    return rejected


def _require_promoter(reviewer: AbstractBaseUser | None, reason: str) -> None:
    if reviewer is None:
        raise PermissionDenied("Promotion needs a reviewer.")
    _require(reviewer)
    _require_reason(reason)


def strategy_promote(*, strategy: Strategy, reviewer: AbstractBaseUser, reason: str) -> Strategy:
    """Make a trial strategy active for every matching run. Needs a person, always, and a verdict
    that says "promote"; the figures it was decided on go into the audit."""
    _require_promoter(reviewer, reason)

    def promoted_by_verdict(locked: Strategy) -> dict:
        verdict = promotion_verdict(locked)
        if verdict.blockers:
            raise ValidationError(_("Promotion is blocked: %(reasons)s.") % {"reasons": "; ".join(verdict.blockers)})
        if not verdict.promotes:
            raise ValidationError(
                _(
                    "The %(source)s says “%(verdict)s”, not “promote”: promote against it only by an explicit "
                    "override, with its reason."
                )
                % {"source": _source(verdict.source), "verdict": verdict.label}
            )
        # Decided on its experiment (no trial run yet: verdicts.py) or on its trial.
        figures = "experiment" if verdict.source == "experiment" else "trial"
        return {figures: verdict.figures, "verdict": verdict.as_json()}

    return _transition(
        strategy.pk, Strategy.Status.ACTIVE, StrategyEvent.Action.PROMOTE, reviewer, reason, promoted_by_verdict
    )


def strategy_promote_override(*, strategy: Strategy, reviewer: AbstractBaseUser, reason: str) -> Strategy:
    """Promote against the verdict: a reviewer's explicit choice, with its reason, marked as an
    override in the audit and on the strategy. Refused where the verdict says promote (that is an
    ordinary promotion) and where it says the strategy does significant harm."""
    _require_promoter(reviewer, reason)

    def overridden(locked: Strategy) -> dict:
        verdict = promotion_verdict(locked)
        if verdict.promotes:
            raise ValidationError(_("The verdict says “promote”: promote it without an override."))
        if verdict.harmful:
            shows = _("The %(source)s shows significant harm: no override promotes it.")
            raise ValidationError(shows % {"source": _source(verdict.source)})
        return {"trial": verdict.figures, "verdict": verdict.as_json(), "override": True}

    return _transition(
        strategy.pk, Strategy.Status.ACTIVE, StrategyEvent.Action.PROMOTE_OVERRIDE, reviewer, reason, overridden
    )


def _source(source: str) -> str:
    return {"trial": _("trial"), "experiment": _("experiment")}.get(source, _("absence of any test"))


def strategy_roll_back(
    *, strategy: Strategy, reviewer: AbstractBaseUser | None, reason: str, automatic: bool = False,
    trial: dict | None = None,
) -> Strategy:  # fmt: skip
    """``trial``: the figures the automatic roll-back was decided on (else they are read now)."""
    if not automatic:
        _require(reviewer)
        if reviewer is None:
            raise PermissionDenied
    _require_reason(reason)
    action = StrategyEvent.Action.AUTO_ROLL_BACK if automatic else StrategyEvent.Action.ROLL_BACK
    if trial is not None:
        return _transition(strategy.pk, Strategy.Status.ROLLED_BACK, action, reviewer, reason, trial=trial)
    return _transition(strategy.pk, Strategy.Status.ROLLED_BACK, action, reviewer, reason, _record)


def strategy_roll_back_harmful(*, strategy: Strategy, reviewer: AbstractBaseUser) -> Strategy:
    """Roll back an active strategy that its watch shows to do harm (the one click of the
    harmful-active-strategy alert), with what is worse as the reason and the watch's figures in
    the audit. Refused when the watch shows no harm now: then a reviewer says why in words."""
    _require(reviewer)
    if reviewer is None:
        raise PermissionDenied
    with transaction.atomic():
        locked = Strategy.objects.select_for_update().get(pk=strategy.pk)
        if locked.status == Strategy.Status.TRIAL:
            raise IllegalTransition("A strategy on trial is rolled back by its trial's verdict or with a reason.")
        reason = "harm"
        if locked.status == Strategy.Status.ACTIVE:
            watch = watch_stats(locked)
            if not watch.harmed:
                raise ValidationError(
                    _("Its watch shows no harm now: roll it back with a reason of your own (the decision form).")
                )
            reason = _(
                "Rolled back for harm since its promotion: %(worse)s significantly worse than before it "
                "(%(runs)s runs since, against %(baseline)s runs of its trial)."
            ) % {
                "worse": ", ".join(f.label for f in watch.figures if f.worse),
                "runs": watch.runs,
                "baseline": watch.baseline_runs,
            }
        return _transition(
            strategy.pk, Strategy.Status.ROLLED_BACK, StrategyEvent.Action.ROLL_BACK, reviewer, reason, _record
        )


def strategy_decide(
    *, strategy: Strategy, reviewer: AbstractBaseUser, action: str, reason: str, trial_fraction: float | None = None
) -> Strategy:
    """One of the reviewer's decisions by name (the review page's form and the API)."""
    if action == "approve":
        return strategy_approve(strategy=strategy, reviewer=reviewer, reason=reason, trial_fraction=trial_fraction)
    if action == "reject":
        return strategy_reject(strategy=strategy, reviewer=reviewer, reason=reason)
    if action == "promote":
        return strategy_promote(strategy=strategy, reviewer=reviewer, reason=reason)
    if action == "promote_override":
        return strategy_promote_override(strategy=strategy, reviewer=reviewer, reason=reason)
    if action == "roll_back":
        return strategy_roll_back(strategy=strategy, reviewer=reviewer, reason=reason)
    raise ValueError(f"Unknown decision {action!r}.")


EDITABLE_FIELDS = (
    "title", "pattern", "old_behaviour", "new_guidance", "condition", "guardrails", "worked_example",
)  # fmt: skip


def strategy_edit(*, strategy: Strategy, editor: AbstractBaseUser, reason: str = "", **content) -> StrategyVersion:
    """A new version with the changed content; the old versions stay readable. Only a proposal,
    or a strategy whose experiment has ended (``Strategy.editable``), can be edited: changing one
    under test would spoil its test. A revised strategy is a proposal again, its new version to be
    tested afresh: the ended experiment's verdict is its old version's (verdicts.py). The title is
    the version's, and the strategy's title follows its current version."""
    _require(editor)
    unknown = set(content) - set(EDITABLE_FIELDS)
    if unknown:
        raise ValidationError(f"Not editable: {', '.join(sorted(unknown))}.")
    # What PostgreSQL would refuse with a 500, whichever caller this is (the form checks too).
    problems = [p for field, value in content.items() for p in unstorable(value, name=field)]
    problems += unstorable(reason, name="reason")
    if "condition" in content:
        problems += check_condition(content["condition"])
    if "guardrails" in content:
        problems += check_guardrails(content["guardrails"])
    if "title" in content:
        content["title"] = str(content["title"]).strip()[:200]
        if not content["title"]:
            problems.append("The title cannot be empty.")
    if problems:
        raise ValidationError(problems)
    with transaction.atomic():
        locked = Strategy.objects.select_for_update().get(pk=strategy.pk)
        if not locked.editable:
            raise IllegalTransition(
                "Only a proposed strategy, or one whose experiment has ended, can be edited: "
                f"this one is {locked.get_status_display().lower()}."
            )
        current = locked.current_version
        base = {f: getattr(current, f) for f in EDITABLE_FIELDS} if current else {}
        # A version from before titles were versioned may have none: the strategy's is its title.
        base["title"] = base.get("title") or locked.title
        base["insights"] = current.insights if current else []  # an insight list is kept as it is
        # After the newest, which may be newer than the current one (an insight update that waited).
        newest = locked.versions.order_by("-number").values_list("number", flat=True).first() or 0
        version = StrategyVersion(strategy=locked, number=newest + 1, author=editor, **{**base, **content})
        if not version.acts:
            raise ValidationError([NO_CONTENT])
        version.save()
        before = locked.status
        locked.current_version, locked.title, locked.status = version, version.title, Strategy.Status.PROPOSED
        locked.save(update_fields=["current_version", "title", "status", "updated_at"])
        strategy_event_record(
            strategy=locked, action=StrategyEvent.Action.EDIT, actor=editor, reason=reason, from_status=before
        )
    return version


def strategy_version_adopt(*, strategy: Strategy, number: int, reviewer: AbstractBaseUser, reason: str) -> Strategy:
    """Make a newer version the one in use: an insight list's update of a live strategy waits for
    this (feedback/strategies/insights.py). Not while the strategy is in an experiment or on trial,
    whose test is of the version they started with; the audit event names the version replaced."""
    _require(reviewer)
    if reviewer is None:
        raise PermissionDenied
    _require_reason(reason)
    with transaction.atomic():
        locked = Strategy.objects.select_for_update().get(pk=strategy.pk)
        if locked.status not in (Strategy.Status.PROPOSED, Strategy.Status.ACTIVE):
            raise IllegalTransition(
                _(
                    "A strategy that is %(status)s keeps the version it is tested with: adopt a newer one once "
                    "its test has ended."
                )
                % {"status": locked.get_status_display().lower()}
            )
        current = locked.current_version
        version = locked.versions.filter(number=number).first()
        if version is None or (current is not None and version.number <= current.number):
            raise ValidationError(_("Only a version newer than the one in use can be adopted."))
        locked.current_version = version
        locked.save(update_fields=["current_version", "updated_at"])
        strategy_event_record(
            strategy=locked,
            action=StrategyEvent.Action.ADOPT,
            actor=reviewer,
            reason=reason,
            from_status=locked.status,
            replaced=current.number if current else None,
        )
    return locked
