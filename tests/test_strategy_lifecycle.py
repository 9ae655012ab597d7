import threading

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import connection

from feedback.models import Strategy, StrategyEvent, StrategyVersion
from feedback.strategies import services
from feedback.strategies.services import IllegalTransition

from .conftest import make_user


def make_strategy(**fields) -> Strategy:
    strategy = Strategy.objects.create(title="Resolve paths", pattern_kind="error_signature", **fields)
    strategy.current_version = StrategyVersion.objects.create(
        strategy=strategy, number=1, title=strategy.title, pattern="read_text_file: no such file",
        new_guidance="Use exact paths.",
        condition={"task_kinds": ["file_analysis"]},
    )  # fmt: skip
    strategy.save()
    return strategy


@pytest.mark.django_db
class TestTransitions:
    def test_the_whole_happy_path_is_audited(self, reviewer, settings):
        from feedback.models import AppliedStrategy

        from .factories import make_run

        settings.STRATEGY_TRIAL_MIN_SAMPLES = 10
        s = make_strategy()
        services.strategy_approve(strategy=s, reviewer=reviewer, reason="looks right", trial_fraction=0.3)
        # The trial improves scores (promotion follows its verdict: tests/test_safe_promotion.py).
        for arm, scores in (("treatment", [0.9, 0.85, 0.95] * 4), ("control", [0.5, 0.6, 0.55] * 4)):
            for score in scores:
                run = make_run(status="succeeded", score=score)
                AppliedStrategy.objects.create(run=run, strategy_version=s.current_version, arm=arm)
        services.strategy_promote(strategy=s, reviewer=reviewer, reason="trial improved")
        services.strategy_roll_back(strategy=s, reviewer=reviewer, reason="no longer needed")
        s.refresh_from_db()
        assert s.status == "rolled_back" and s.trial_fraction == 0.3 and s.trial_started_at
        events = list(s.events.values_list("action", "from_status", "to_status", "actor__username", "reason"))
        assert events == [
            ("approve", "proposed", "trial", "reviewer", "looks right"),
            ("promote", "trial", "active", "reviewer", "trial improved"),
            ("roll_back", "active", "rolled_back", "reviewer", "no longer needed"),
        ]
        trial = s.events.get(action="promote").snapshot["trial"]  # its figures at the decision
        assert (trial["method"], trial["recommendation"], trial["treatment"]["n"]) == ("mSPRT", "promote", 12)
        assert s.events.get(action="approve").snapshot["new_guidance"] == "Use exact paths."

    @pytest.mark.parametrize(
        ("status", "action"),
        [
            ("proposed", "promote"),  # never straight to active
            ("proposed", "roll_back"),
            ("trial", "approve"),
            ("trial", "reject"),
            ("active", "approve"),
            ("active", "promote"),
            ("rejected", "approve"),
            ("rolled_back", "promote"),
        ],
    )
    def test_illegal_transitions_are_refused(self, reviewer, status, action):
        s = make_strategy(status=status)
        call = getattr(services, f"strategy_{action}")
        with pytest.raises(IllegalTransition):
            call(strategy=s, reviewer=reviewer, reason="because")
        s.refresh_from_db()
        assert s.status == status and not s.events.exists()

    def test_reject_and_roll_back_need_a_reason(self, reviewer):
        with pytest.raises(ValidationError):
            services.strategy_reject(strategy=make_strategy(), reviewer=reviewer, reason="  ")
        with pytest.raises(ValidationError):
            services.strategy_roll_back(strategy=make_strategy(status="trial"), reviewer=reviewer, reason="")

    def test_only_reviewers_decide(self, operator, staff):
        s = make_strategy()
        for user in (operator, staff):
            with pytest.raises(PermissionDenied):
                services.strategy_approve(strategy=s, reviewer=user, reason="go")
        with pytest.raises(PermissionDenied):
            services.strategy_promote(strategy=make_strategy(status="trial"), reviewer=None, reason="go")

    def test_edit_makes_a_new_version_and_keeps_the_old(self, reviewer):
        s = make_strategy()
        version = services.strategy_edit(
            strategy=s, editor=reviewer, reason="sharper", new_guidance="List sub-folders, then read.",
            guardrails=[{"type": "tool_precondition", "tool": "read_text_file", "requires": "list_directory"}],
        )  # fmt: skip
        s.refresh_from_db()
        assert s.current_version == version and version.number == 2
        assert version.pattern == "read_text_file: no such file"  # unchanged fields carry over
        assert s.versions.get(number=1).new_guidance == "Use exact paths."
        assert s.events.get().action == "edit"

    def test_an_edited_title_is_a_new_version_with_its_audit_event(self, reviewer):
        s = make_strategy()
        version = services.strategy_edit(
            strategy=s, editor=reviewer, reason="say what it does", title="Look in sub-folders for the file"
        )
        s.refresh_from_db()
        assert s.title == "Look in sub-folders for the file" == version.title and version.number == 2
        assert version.new_guidance == "Use exact paths."  # the rest carries over
        assert s.versions.get(number=1).title == "Resolve paths"  # the old version keeps its title
        event = s.events.get()
        assert (event.action, event.version, event.actor) == ("edit", version, reviewer)
        assert event.reason == "say what it does"
        assert event.snapshot["title"] == "Look in sub-folders for the file"

    def test_a_title_cannot_be_emptied(self, reviewer):
        s = make_strategy()
        with pytest.raises(ValidationError) as bad:
            services.strategy_edit(strategy=s, editor=reviewer, title="   ")
        assert "The title cannot be empty." in str(bad.value)
        s.refresh_from_db()
        assert s.title == "Resolve paths" and s.versions.count() == 1

    def test_edit_refuses_bad_content(self, reviewer):
        s = make_strategy()
        with pytest.raises(ValidationError) as bad:
            services.strategy_edit(
                strategy=s, editor=reviewer, condition={"regex": "("}, guardrails=[{"type": "teleport"}]
            )
        assert "not a valid regular expression" in str(bad.value) and "type must be one of" in str(bad.value)
        assert s.versions.count() == 1

    def test_a_trial_cannot_be_edited(self, reviewer):
        with pytest.raises(IllegalTransition):
            services.strategy_edit(strategy=make_strategy(status="trial"), editor=reviewer, new_guidance="x")


def _at_once(*actions):
    """Run each action in its own thread, hence its own database connection, at the same time."""
    barrier = threading.Barrier(len(actions))
    outcomes = [None] * len(actions)

    def worker(i, action):
        try:
            barrier.wait()
            action()
            outcomes[i] = "ok"
        except Exception as exc:
            outcomes[i] = type(exc).__name__
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(i, a)) for i, a in enumerate(actions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outcomes


@pytest.mark.django_db(transaction=True)
def test_two_reviewers_at_once_leave_one_consistent_result():
    alice, bob = make_user("alice", "reviewer"), make_user("bob", "reviewer")
    s = make_strategy()
    outcomes = _at_once(
        lambda: services.strategy_approve(strategy=s, reviewer=alice, reason="go"),
        lambda: services.strategy_reject(strategy=s, reviewer=bob, reason="no"),
    )
    s.refresh_from_db()
    assert sorted(outcomes) == ["IllegalTransition", "ok"]
    event = StrategyEvent.objects.get(strategy=s)
    assert event.to_status == s.status and s.status in ("trial", "rejected")


@pytest.mark.django_db(transaction=True)
def test_two_reviewers_editing_and_approving_at_once_are_serialised():
    alice, bob = make_user("alice", "reviewer"), make_user("bob", "reviewer")
    s = make_strategy()
    outcomes = _at_once(
        lambda: services.strategy_edit(strategy=s, editor=alice, new_guidance="Sharper guidance."),
        lambda: services.strategy_approve(strategy=s, reviewer=bob, reason="go"),
    )
    s.refresh_from_db()
    events = list(StrategyEvent.objects.filter(strategy=s).order_by("id").values_list("action", flat=True))
    if outcomes == ["ok", "ok"]:
        # Edit first, then approve: two audit entries, and the trial runs the edited version.
        assert events == ["edit", "approve"] and s.current_version.number == 2
        assert StrategyEvent.objects.get(action="approve").snapshot["new_guidance"] == "Sharper guidance."
    else:
        # Approve first: the edit of a strategy on trial is refused; one entry.
        assert outcomes == ["IllegalTransition", "ok"] and events == ["approve"]
    assert s.status == "trial"
