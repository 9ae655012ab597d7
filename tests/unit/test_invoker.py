import time

from feedback.agent import invoker
from feedback.agent.tools import BUILTIN_TOOLS, Tool, ToolContext, ToolError

CTX = ToolContext(run_id=0, workspace=None)  # type: ignore[arg-type]
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


def _tool(func, **kwargs) -> Tool:
    return Tool(name="t", description="test tool", parameters=SCHEMA, func=func, **kwargs)


def test_unknown_tool_becomes_an_observation():
    outcome = invoker.invoke(None, "rm_rf", "{}", CTX, available=list(BUILTIN_TOOLS))
    assert not outcome.ok
    assert "Unknown tool 'rm_rf'" in outcome.error
    assert "calculator" in outcome.error
    assert outcome.attempts == []


def test_malformed_json_is_recorded_raw():
    outcome = invoker.invoke(_tool(lambda ctx, n: n), "t", '{"n": 1', CTX, available=["t"])
    assert not outcome.ok
    assert "not valid JSON" in outcome.error
    assert outcome.arguments == '{"n": 1'
    assert outcome.error_class == "InvalidToolCall"


def test_schema_violation_names_the_field():
    outcome = invoker.invoke(_tool(lambda ctx, n: n), "t", '{"n": "one"}', CTX, available=["t"])
    assert not outcome.ok
    assert "(n)" in outcome.error and "integer" in outcome.error


def test_retryable_errors_are_retried_until_success(monkeypatch):
    monkeypatch.setattr(invoker, "BACKOFF_BASE_SECONDS", 0.001)
    calls = []

    def flaky(ctx, n):
        calls.append(n)
        if len(calls) < 3:
            raise ToolError("busy", retryable=True)
        return n * 2

    outcome = invoker.invoke(_tool(flaky), "t", '{"n": 4}', CTX, available=["t"])
    assert outcome.ok and outcome.result == 8
    assert [a.number for a in outcome.attempts] == [1, 2, 3]
    assert [a.retryable for a in outcome.attempts] == [True, True, False]


def test_permanent_errors_are_not_retried():
    calls = []

    def broken(ctx, n):
        calls.append(n)
        raise ToolError("bad input")

    outcome = invoker.invoke(_tool(broken), "t", '{"n": 1}', CTX, available=["t"])
    assert not outcome.ok and outcome.error == "bad input"
    assert len(calls) == 1 and len(outcome.attempts) == 1


def test_a_tool_bug_is_contained():
    outcome = invoker.invoke(_tool(lambda ctx, n: 1 / 0), "t", '{"n": 1}', CTX, available=["t"])
    assert not outcome.ok
    assert outcome.error_class == "ZeroDivisionError"


def test_slow_tools_time_out(monkeypatch):
    monkeypatch.setattr(invoker, "BACKOFF_BASE_SECONDS", 0.001)
    outcome = invoker.invoke(
        _tool(lambda ctx, n: time.sleep(0.5), timeout=0.05), "t", '{"n": 1}', CTX, available=["t"]
    )
    assert not outcome.ok
    assert outcome.error_class == "ToolTimeout"
    assert len(outcome.attempts) == invoker.MAX_ATTEMPTS
