import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError

from feedback.models import Strategy, StrategyEvent, StrategyVersion

pytestmark = pytest.mark.django_db


def _strategy(**fields):
    strategy = Strategy.objects.create(title="List before reading", pattern_kind="tool_sequence", **fields)
    version = StrategyVersion.objects.create(
        strategy=strategy,
        number=1,
        pattern="read_text_file fails with No such file",
        new_guidance="List the directory before reading a file.",
    )
    strategy.current_version = version
    strategy.save()
    return strategy, version


@pytest.mark.parametrize(
    ("start", "allowed"),
    [
        ("proposed", {"experiment", "trial", "rejected"}),
        ("experiment", {"trial", "rejected", "proposed"}),
        ("trial", {"active", "rolled_back"}),
        ("active", {"rolled_back"}),
        ("rejected", set()),
        ("rolled_back", set()),
    ],
)
def test_the_lifecycle_allows_only_its_transitions(start, allowed):
    strategy = Strategy(status=start)
    assert {s for s in Strategy.Status.values if strategy.can_move_to(s)} == allowed


def test_audit_events_are_append_only():
    strategy, version = _strategy()
    event = StrategyEvent.objects.create(
        strategy=strategy,
        version=version,
        action="propose",
        to_status="proposed",
        snapshot=version.snapshot(),
    )
    event.reason = "rewritten history"
    with pytest.raises(ValidationError):
        event.save()
    with pytest.raises(ValidationError):
        event.delete()
    assert StrategyEvent.objects.get().reason == ""
    assert event.snapshot["new_guidance"] == "List the directory before reading a file."


def test_repeated_pattern_keys_are_refused():
    _strategy(pattern_key="tool_sequence:read_text_file")
    with pytest.raises(IntegrityError):
        _strategy(pattern_key="tool_sequence:read_text_file")
