"""Malformed and empty model replies, the main way small models fail, become patterns and remedies.

Issue 15: on a small local model (llama.cpp) mining looked only at tool-call steps, so the
replies the loop could not use (recorded as model_error steps, or as tool calls to unknown tools
with unusable arguments) never became a pattern.
"""

from datetime import timedelta

import pytest
from django.utils import timezone

from feedback.agent.errors import error_signature
from feedback.agent.invoker import invoke
from feedback.agent.llm.adapter import parse_json_reply
from feedback.agent.tools import ToolContext, enabled_tools
from feedback.models import Run, Step, Strategy, Task
from feedback.strategies.mining import mine
from feedback.strategies.proposals import mine_and_propose
from feedback.strategies.replies import _reply_steps, reply_failure

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("mining_thresholds")]

TOOLS = ["analyze_text", "calculator", "http_get", "list_directory", "read_text_file", "update_plan"]
NOT_JSON = "Your reply was not valid JSON (Expecting value)."


def add_run(*, kind="arithmetic", good, steps=(), model="small-model", days_ago=0, status=None):
    """A finished run on an OpenAI-compatible endpoint; ``steps``: (kind, tool, error_class, error, call id)."""
    task = Task.objects.create(text="What is seven times six?", kind=kind)
    run = Run.objects.create(
        task=task, task_kind=kind, status=status or ("succeeded" if good else "failed"),
        score=0.95 if good else None, outcome="accomplished" if good else "not_accomplished",
        llm_backend="openai", model_name=model, tools_offered=TOOLS,
        created_at=timezone.now() - timedelta(days=days_ago),
    )  # fmt: skip
    for index, (step_kind, tool, error_class, error, call_id) in enumerate(steps):
        Step.objects.create(
            run=run, index=index, turn=index, kind=step_kind, tool_name=tool, tool_call_id=call_id,
            success=not error, error=error, error_class=error_class,
            error_signature=error_signature(tool, error_class, error) if error and tool else "",
        )  # fmt: skip
    return run


def not_json(call_id=""):
    return ("model_error", "", "MalformedReply", NOT_JSON, call_id)


def empty():
    return ("model_error", "", "EmptyReply", "Your last reply was empty.", "")


def unknown_tool(call_id="call_1"):
    return ("tool_call", "launch_rockets", "InvalidToolCall", "Unknown tool 'launch_rockets'. Available: x.", call_id)


def calculator(call_id="call_1"):
    return ("tool_call", "calculator", "", "", call_id)


def succeeding(n=12, kind="arithmetic", call_id="call_1"):
    return [add_run(kind=kind, good=True, steps=[calculator(call_id)]) for _ in range(n)]


def test_json_replies_that_are_not_json_are_a_pattern_with_their_evidence():
    failing = [add_run(good=False, steps=[not_json(), not_json(), not_json()]) for _ in range(8)]
    succeeding()
    patterns = {p.key: p for p in mine(window_days=30)}
    pattern = patterns["malformed_reply:arithmetic:invalid_json:json"]
    assert (pattern.failing_with, pattern.failing_total, pattern.succeeding_with, pattern.succeeding_total) == (
        8, 8, 0, 12,
    )  # fmt: skip
    assert pattern.evidence == sorted(r.pk for r in failing)
    assert pattern.details["failure"] == "invalid_json" and pattern.details["mode"] == "json"
    assert pattern.details["example_error"] == NOT_JSON
    assert pattern.details["tools_used_by_successes"] == ["calculator"]


def test_the_proposal_reminds_of_the_format_and_offers_fewer_tools_and_native_calls_where_they_work():
    add_run(good=False, steps=[not_json()])  # below the support on its own
    for _ in range(7):
        add_run(good=False, steps=[not_json(), not_json()])
    succeeding()  # native tool calls ("call_1") worked for this model
    mine_and_propose(window_days=30)
    strategy = Strategy.objects.get(pattern_kind="malformed_reply")
    version = strategy.current_version
    assert strategy.title == "Replies are not valid JSON in arithmetic tasks" == version.title
    assert version.new_guidance.startswith("When asked to reply in JSON, reply with exactly one JSON object and")
    assert '{"tool_calls": [{"name": "<tool>", "arguments": {...}}]}' in version.new_guidance
    assert version.guardrails == [
        {"type": "tool_subset", "tools": ["calculator"]},
        {"type": "tool_mode", "mode": "native"},
    ]
    assert version.condition == {"task_kinds": ["arithmetic"]}
    assert strategy.evidence.count() == 8


def test_no_switch_to_native_calls_where_they_were_never_seen_to_work():
    for _ in range(8):
        add_run(good=False, steps=[not_json()])
    succeeding(call_id="json-1-0")  # the successes replied in JSON mode too
    mine_and_propose(window_days=30)
    version = Strategy.objects.get(pattern_kind="malformed_reply").current_version
    assert version.guardrails == [{"type": "tool_subset", "tools": ["calculator"]}]


def test_empty_native_replies_switch_to_json_mode():
    for _ in range(6):
        add_run(kind="file_analysis", good=False, steps=[empty(), empty(), empty()])
    for _ in range(10):
        add_run(kind="file_analysis", good=True, steps=[("tool_call", "read_text_file", "", "", "call_1")])
    mine_and_propose(window_days=30)
    strategy = Strategy.objects.get(pattern_key="malformed_reply:file_analysis:empty_reply:native")
    assert strategy.current_version.new_guidance.startswith("Never reply with an empty message")
    assert strategy.current_version.guardrails == [
        {"type": "tool_subset", "tools": ["read_text_file"]},
        {"type": "tool_mode", "mode": "json"},
    ]


def test_unknown_tools_are_a_malformed_reply_not_an_error_signature():
    for _ in range(8):
        add_run(good=False, steps=[unknown_tool(), calculator("call_2")])
    succeeding()
    keys = {p.key for p in mine(window_days=30)}
    assert "malformed_reply:arithmetic:unknown_tool:native" in keys
    assert not any(k.startswith("error_signature:") for k in keys)  # one pattern, not two
    mine_and_propose(window_days=30)
    version = Strategy.objects.get(pattern_kind="malformed_reply").current_version
    assert version.new_guidance.startswith("Call only the tools listed for this task, with exactly their names")
    assert version.guardrails == [{"type": "tool_subset", "tools": ["calculator"]}]


def test_what_succeeding_runs_do_as_often_is_not_a_pattern():
    # Every run stumbles once and recovers: no contrast, no lesson.
    for _ in range(8):
        add_run(good=False, steps=[empty()])
    for _ in range(12):
        add_run(good=True, steps=[empty(), calculator()])
    assert [p for p in mine(window_days=30) if p.kind == "malformed_reply"] == []


def test_an_unreachable_endpoint_is_not_a_malformed_reply():
    for _ in range(8):
        add_run(good=False, steps=[("model_error", "", "LLMError", "APIConnectionError: refused", "")])
    succeeding()
    assert [p for p in mine(window_days=30) if p.kind == "malformed_reply"] == []


def test_replies_before_the_window_are_not_counted():
    for _ in range(8):
        add_run(good=False, steps=[not_json()], days_ago=45)
    succeeding()
    assert [p for p in mine(window_days=30) if p.kind == "malformed_reply"] == []
    assert [p.key for p in mine(window_days=None) if p.kind == "malformed_reply"] == [
        "malformed_reply:arithmetic:invalid_json:json"
    ]


def _runtime_messages(tmp_path) -> list[tuple[str, str, str, tuple[str, str]]]:
    """The runtime's own messages for each failure, from the functions that write them."""
    tools = enabled_tools()
    ctx = ToolContext(run_id=1, workspace=tmp_path)

    def invalid(name, arguments):
        outcome = invoke(name, arguments, ctx, tools)
        assert outcome.error_class == "InvalidToolCall"
        return outcome.error

    return [
        ("MalformedReply", parse_json_reply("Sure! It is 42.", "t").unusable, "", ("invalid_json", "json")),
        ("MalformedReply", parse_json_reply("[1, 2]", "t").unusable, "", ("invalid_json", "json")),
        ("MalformedReply", parse_json_reply('{"thought": "hm"}', "t").unusable, "", ("bad_tool_calls", "json")),
        ("MalformedReply", parse_json_reply('{"tool_calls": [{}]}', "t").unusable, "", ("bad_tool_calls", "json")),
        ("EmptyReply", "Your last reply was empty.", "", ("empty_reply", "native")),
        ("InvalidToolCall", invalid("launch_rockets", "{}"), "call_9", ("unknown_tool", "native")),
        ("InvalidToolCall", invalid("calculator", '{"expression": "1 +'), "json-3-0", ("malformed_arguments", "json")),
        ("InvalidToolCall", invalid("calculator", "[1]"), "call_9", ("malformed_arguments", "native")),
        ("InvalidToolCall", invalid("calculator", '{"expression": 42}'), "call_9", ("invalid_arguments", "native")),
    ]


def test_the_sql_and_the_page_classify_the_runtimes_messages_alike(tmp_path):
    messages = _runtime_messages(tmp_path)
    run = add_run(good=False)
    for index, (error_class, error, call_id, _) in enumerate(messages):
        step_kind = "tool_call" if error_class == "InvalidToolCall" else "model_error"
        Step.objects.create(run=run, index=index, kind=step_kind, tool_name="x", tool_call_id=call_id,
                            success=False, error=error, error_class=error_class)  # fmt: skip
    in_sql = list(_reply_steps(timezone.now() - timedelta(days=1)).order_by("index").values_list("failure", "mode"))
    assert in_sql == [expected for *_, expected in messages]
    assert [reply_failure(error_class=c, error=e, tool_call_id=i) for c, e, i, _ in messages] == in_sql
    assert reply_failure(error_class="LLMError", error="APIConnectionError") is None


def test_an_active_tool_subset_offers_matching_runs_fewer_tools():
    from feedback.agent.llm import LLMReply
    from feedback.models import StrategyVersion

    from .factories import make_run
    from .test_agent_loop import ScriptedModel, run_loop

    strategy = Strategy.objects.create(title="Fewer tools", pattern_kind="malformed_reply", status="active")
    strategy.current_version = StrategyVersion.objects.create(
        strategy=strategy, number=1, title="Fewer tools", pattern="p", new_guidance="Call only the tools listed.",
        condition={"task_kinds": ["arithmetic"]}, guardrails=[{"type": "tool_subset", "tools": ["calculator"]}],
    )  # fmt: skip
    strategy.save()
    run = run_loop(make_run(kind="arithmetic"), ScriptedModel([LLMReply(content="4")]))
    assert run.tools_offered == ["calculator", "update_plan"]
    other = run_loop(make_run(kind="general", text="Say hello"), ScriptedModel([LLMReply(content="Hello")]))
    assert len(other.tools_offered) > 2  # out of the strategy's scope: every tool
