"""The strategy lifecycle: every state change people (or the system) trigger.

proposed --approve--> trial --promote--> active --roll back--> rolled_back
    \\--reject--> rejected      \\--roll back (a reviewer, or automatically on significant harm)

Each function locks the strategy row, checks the transition against Strategy.TRANSITIONS, and
writes one audit event with the content at that moment. Two reviewers acting at once are
serialised by the lock: the second sees the first one's result. Every decision needs a reason.

Promotion is refused while a counter-metric of the trial is significantly worse or its split of
runs is mismatched (trials.py): there is no override. A block by a real worsening lasts, which
is the point; a false one (at most 5% of trials per counter-metric, by the always-valid test)
fades as runs accumulate, since the interval is recomputed at every look. An override would
bring back the judging-by-eye the sequential test replaces.
"""

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from feedback.agent.guardrails import check_guardrails
from feedback.models import Strategy, StrategyEvent, StrategyVersion
from feedback.storable import unstorable

from .conditions import check_condition
from .injection import strategies_changed
from .trials import trial_stats

_PAST = {"approve": "approved", "reject": "rejected", "promote": "promoted", "roll_back": "rolled back",
         "auto_roll_back": "rolled back"}  # fmt: skip


class IllegalTransition(Exception):
    """The strategy is not in a state that allows this action (maybe someone acted first)."""


def _require(user: AbstractBaseUser | None) -> None:
    if user is not None and not user.has_perm("feedback.decide_strategy"):
        raise PermissionDenied


def _require_reason(reason: str) -> None:
    if not reason.strip():
        raise ValidationError(_("Say why: every decision on a strategy needs a reason."))


def _trial_record(strategy: Strategy) -> dict:
    """The trial's figures at the moment of a decision, for its audit event."""
    return trial_stats(strategy).as_json() if strategy.trial_started_at else {}


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
        strategy.save(update_fields=["status", "trial_started_at", "updated_at"])
        _log(strategy, action, actor, reason, before, **extra)
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
        Strategy.objects.filter(pk=strategy.pk, status=Strategy.Status.PROPOSED).update(trial_fraction=trial_fraction)
        strategies_changed()
    return _transition(strategy.pk, Strategy.Status.TRIAL, StrategyEvent.Action.APPROVE, reviewer, reason)


def strategy_reject(*, strategy: Strategy, reviewer: AbstractBaseUser, reason: str) -> Strategy:
    _require(reviewer)
    _require_reason(reason)
    return _transition(strategy.pk, Strategy.Status.REJECTED, StrategyEvent.Action.REJECT, reviewer, reason)


def strategy_promote(*, strategy: Strategy, reviewer: AbstractBaseUser, reason: str) -> Strategy:
    """Make a trial strategy active for every matching run. Needs a person, always, and a trial
    that no counter-metric or split mismatch blocks; the trial's figures go into the audit."""
    if reviewer is None:
        raise PermissionDenied("Promotion needs a reviewer.")
    _require(reviewer)
    _require_reason(reason)

    def unblocked(locked: Strategy) -> dict:
        stats = trial_stats(locked)
        if stats.blockers:
            raise ValidationError(_("Promotion is blocked: %(reasons)s.") % {"reasons": "; ".join(stats.blockers)})
        return {"trial": stats.as_json()}

    return _transition(strategy.pk, Strategy.Status.ACTIVE, StrategyEvent.Action.PROMOTE, reviewer, reason, unblocked)


def strategy_roll_back(
    *, strategy: Strategy, reviewer: AbstractBaseUser | None, reason: str, automatic: bool = False,
    trial: dict | None = None,
) -> Strategy:  # fmt: skip
    if not automatic:
        _require(reviewer)
        if reviewer is None:
            raise PermissionDenied
    _require_reason(reason)
    action = StrategyEvent.Action.AUTO_ROLL_BACK if automatic else StrategyEvent.Action.ROLL_BACK
    if trial is not None:
        return _transition(strategy.pk, Strategy.Status.ROLLED_BACK, action, reviewer, reason, trial=trial)
    return _transition(
        strategy.pk, Strategy.Status.ROLLED_BACK, action, reviewer, reason, lambda s: {"trial": _trial_record(s)}
    )


def strategy_decide(
    *, strategy: Strategy, reviewer: AbstractBaseUser, action: str, reason: str, trial_fraction: float | None = None
) -> Strategy:
    """One of the reviewer's four decisions by name (the review page's form and the API)."""
    if action == "approve":
        return strategy_approve(strategy=strategy, reviewer=reviewer, reason=reason, trial_fraction=trial_fraction)
    if action == "reject":
        return strategy_reject(strategy=strategy, reviewer=reviewer, reason=reason)
    if action == "promote":
        return strategy_promote(strategy=strategy, reviewer=reviewer, reason=reason)
    if action == "roll_back":
        return strategy_roll_back(strategy=strategy, reviewer=reviewer, reason=reason)
    raise ValueError(f"Unknown decision {action!r}.")


EDITABLE_FIELDS = (
    "title", "pattern", "old_behaviour", "new_guidance", "condition", "guardrails", "worked_example",
)  # fmt: skip


def strategy_edit(*, strategy: Strategy, editor: AbstractBaseUser, reason: str = "", **content) -> StrategyVersion:
    """A new version with the changed content; the old versions stay readable. Only a proposal
    can be edited: changing a strategy on trial would spoil its experiment. The title is the
    version's, and the strategy's title follows its current version."""
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
    if "new_guidance" in content and not str(content["new_guidance"]).strip():
        problems.append("The guidance cannot be empty.")
    if "title" in content:
        content["title"] = str(content["title"]).strip()[:200]
        if not content["title"]:
            problems.append("The title cannot be empty.")
    if problems:
        raise ValidationError(problems)
    with transaction.atomic():
        locked = Strategy.objects.select_for_update().get(pk=strategy.pk)
        if locked.status != Strategy.Status.PROPOSED:
            raise IllegalTransition("Only a proposed strategy can be edited.")
        current = locked.current_version
        base = {f: getattr(current, f) for f in EDITABLE_FIELDS} if current else {}
        # A version from before titles were versioned may have none: the strategy's is its title.
        base["title"] = base.get("title") or locked.title
        version = StrategyVersion.objects.create(
            strategy=locked,
            number=(current.number + 1) if current else 1,
            author=editor,
            **{**base, **content},
        )
        locked.current_version = version
        locked.title = version.title
        locked.save(update_fields=["current_version", "title", "updated_at"])
        _log(locked, StrategyEvent.Action.EDIT, editor, reason, locked.status)
    return version
