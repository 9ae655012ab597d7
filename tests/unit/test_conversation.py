"""The conversation the loop keeps is the one a rebuild from the steps gives, turn by turn."""

from feedback.agent.conversation import Conversation, conversation
from feedback.models import Run, Step, Task


def _run() -> Run:
    return Run(task=Task(text="Add 1 and 2."), system_prompt="You add numbers.")


def _call(turn: int, call_id: str) -> Step:
    return Step(turn=turn, kind=Step.Kind.TOOL_CALL, tool_name="calculator", tool_call_id=call_id,
                arguments={"expression": "1+2"}, result={"value": 3}, success=True)  # fmt: skip


def test_new_turns_are_appended():
    run, steps = _run(), [_call(1, "a")]
    history = Conversation(run, steps)
    assert history.messages() == conversation(run, steps)
    steps += [Step(turn=2, kind=Step.Kind.THOUGHT, thought="Once more."), _call(2, "b")]
    assert history.messages() == conversation(run, steps)
    assert [m["role"] for m in history.messages()] == ["system", "user", "assistant", "tool", "assistant", "tool"]


def test_a_turn_that_goes_on_after_it_was_sent_is_merged_into_one_reply():
    run, steps = _run(), [_call(1, "a")]
    history = Conversation(run, steps)
    history.messages()
    steps.append(_call(1, "b"))  # a confirmed call of the same turn, recorded later
    messages = history.messages()
    assert messages == conversation(run, steps)
    assert [c["id"] for c in messages[2]["tool_calls"]] == ["a", "b"]
