"""The strategy lifecycle: every state change people (or the system) trigger.

proposed --approve--> trial --promote--> active --roll back--> rolled_back
    \\--reject--> rejected      \\--roll back (a reviewer, or automatically on significant harm)

Each function locks the strategy row, checks the transition against Strategy.TRANSITIONS, and
writes one audit event with the content at that moment. Two reviewers acting at once are
serialised by the lock: the second sees the first one's result.
"""

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from feedback.agent.guardrails import check_guardrails
from feedback.models import Strategy, StrategyEvent, StrategyVersion

from .conditions import check_condition
from .injection import strategies_changed

_PAST = {"approve": "approved", "reject": "rejected", "promote": "promoted", "roll_back": "rolled back",
         "auto_roll_back": "rolled back"}  # fmt: skip


class IllegalTransition(Exception):
    """The strategy is not in a state that allows this action (maybe someone acted first)."""


def _require(user: AbstractBaseUser | None) -> None:
    if user is not None and not user.has_perm("feedback.decide_strategy"):
        raise PermissionDenied


def _log(strategy: Strategy, action: str, actor, reason: str, from_status: str, **extra) -> StrategyEvent:
    version = strategy.current_version
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


def _transition(strategy_id: int, to: str, action: str, actor, reason: str, **extra) -> Strategy:
    with transaction.atomic():
        # No join in the locking query: after waiting for the lock, PostgreSQL re-reads the locked
        # row but not a joined one, so a version created meanwhile would look missing.
        strategy = Strategy.objects.select_for_update().get(pk=strategy_id)
        if not strategy.can_move_to(to):
            raise IllegalTransition(
                f"A strategy that is {strategy.get_status_display().lower()} cannot be {_PAST[action]}."
            )
        before = strategy.status
        strategy.status = to
        if to == Strategy.Status.TRIAL:
            strategy.trial_started_at = timezone.now()
        strategy.save(update_fields=["status", "trial_started_at", "updated_at"])
        _log(strategy, action, actor, reason, before, **extra)
    return strategy


def strategy_approve(
    *, strategy: Strategy, reviewer: AbstractBaseUser | None, reason: str = "", trial_fraction: float | None = None
) -> Strategy:
    """Send a proposal to a controlled trial (``reviewer`` None: the opt-in autonomy)."""
    _require(reviewer)
    if trial_fraction is not None:
        if not 0 < trial_fraction < 1:
            raise ValidationError("The trial fraction must be between 0 and 1 (exclusive).")
        Strategy.objects.filter(pk=strategy.pk, status=Strategy.Status.PROPOSED).update(trial_fraction=trial_fraction)
        strategies_changed()
    return _transition(strategy.pk, Strategy.Status.TRIAL, StrategyEvent.Action.APPROVE, reviewer, reason)


def strategy_reject(*, strategy: Strategy, reviewer: AbstractBaseUser, reason: str) -> Strategy:
    _require(reviewer)
    if not reason.strip():
        raise ValidationError("Say why the strategy is rejected.")
    return _transition(strategy.pk, Strategy.Status.REJECTED, StrategyEvent.Action.REJECT, reviewer, reason)


def strategy_promote(
    *, strategy: Strategy, reviewer: AbstractBaseUser, reason: str = "", trial: dict | None = None
) -> Strategy:
    """Make a trial strategy active for every matching run. Needs a person, always."""
    if reviewer is None:
        raise PermissionDenied("Promotion needs a reviewer.")
    _require(reviewer)
    return _transition(
        strategy.pk, Strategy.Status.ACTIVE, StrategyEvent.Action.PROMOTE, reviewer, reason, trial=trial or {}
    )


def strategy_roll_back(
    *, strategy: Strategy, reviewer: AbstractBaseUser | None, reason: str, automatic: bool = False,
    trial: dict | None = None,
) -> Strategy:  # fmt: skip
    if not automatic:
        _require(reviewer)
        if reviewer is None:
            raise PermissionDenied
    if not reason.strip():
        raise ValidationError("Say why the strategy is rolled back.")
    action = StrategyEvent.Action.AUTO_ROLL_BACK if automatic else StrategyEvent.Action.ROLL_BACK
    return _transition(strategy.pk, Strategy.Status.ROLLED_BACK, action, reviewer, reason, trial=trial or {})


EDITABLE_FIELDS = ("pattern", "old_behaviour", "new_guidance", "condition", "guardrails", "worked_example")


def strategy_edit(*, strategy: Strategy, editor: AbstractBaseUser, reason: str = "", **content) -> StrategyVersion:
    """A new version with the changed content; the old versions stay readable. Only a proposal
    can be edited: changing a strategy on trial would spoil its experiment."""
    _require(editor)
    unknown = set(content) - set(EDITABLE_FIELDS)
    if unknown:
        raise ValidationError(f"Not editable: {', '.join(sorted(unknown))}.")
    problems = []
    if "condition" in content:
        problems += check_condition(content["condition"])
    if "guardrails" in content:
        problems += check_guardrails(content["guardrails"])
    if "new_guidance" in content and not str(content["new_guidance"]).strip():
        problems.append("The guidance cannot be empty.")
    if problems:
        raise ValidationError(problems)
    with transaction.atomic():
        locked = Strategy.objects.select_for_update().get(pk=strategy.pk)
        if locked.status != Strategy.Status.PROPOSED:
            raise IllegalTransition("Only a proposed strategy can be edited.")
        current = locked.current_version
        base = {f: getattr(current, f) for f in EDITABLE_FIELDS} if current else {}
        version = StrategyVersion.objects.create(
            strategy=locked,
            number=(current.number + 1) if current else 1,
            author=editor,
            **{**base, **content},
        )
        locked.current_version = version
        locked.save(update_fields=["current_version", "updated_at"])
        _log(locked, StrategyEvent.Action.EDIT, editor, reason, locked.status)
    return version
