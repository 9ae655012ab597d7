import time

import pytest
import tenacity.wait

from feedback.agent import invoker
from feedback.agent.breaker import CircuitBreaker
from feedback.agent.tools import BUILTIN_TOOLS, Tool, ToolContext, ToolError

CTX = ToolContext(run_id=0, workspace=None)  # type: ignore[arg-type]
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


@pytest.fixture(autouse=True)
def _fast_backoff(settings):
    settings.TOOL_BACKOFF_SECONDS = 0.001
    settings.TOOL_BREAKER_FAILURES = 5


def _tools(func, **kwargs) -> dict[str, Tool]:
    return {"t": Tool(name="t", description="test tool", parameters=SCHEMA, func=func, **kwargs)}


def test_unknown_tool_becomes_an_observation():
    outcome = invoker.invoke("rm_rf", "{}", CTX, BUILTIN_TOOLS)
    assert not outcome.ok
    assert "Unknown tool 'rm_rf'" in outcome.error
    assert "calculator" in outcome.error
    assert outcome.attempts == []


def test_malformed_json_is_recorded_raw():
    outcome = invoker.invoke("t", '{"n": 1', CTX, _tools(lambda ctx, n: n))
    assert not outcome.ok
    assert "not valid JSON" in outcome.error
    assert outcome.arguments == '{"n": 1'
    assert outcome.error_class == "InvalidToolCall"


def test_schema_violation_names_the_field():
    outcome = invoker.invoke("t", '{"n": "one"}', CTX, _tools(lambda ctx, n: n))
    assert not outcome.ok
    assert "(n)" in outcome.error and "integer" in outcome.error


def test_retryable_errors_are_retried_with_growing_delays(settings, monkeypatch):
    settings.TOOL_BACKOFF_SECONDS = 0.01
    ceilings = []
    # The full jitter of the one retry policy (feedback/retrying.py: tenacity's random exponential).
    monkeypatch.setattr(tenacity.wait.random, "uniform", lambda low, high: ceilings.append(high) or 0)
    calls = []

    def flaky(ctx, n):
        calls.append(n)
        if len(calls) < 3:
            raise ToolError("busy", retryable=True)
        return n * 2

    outcome = invoker.invoke("t", '{"n": 4}', CTX, _tools(flaky))
    assert outcome.ok and outcome.result == 8
    assert [a.number for a in outcome.attempts] == [1, 2, 3]
    assert [a.retryable for a in outcome.attempts] == [True, True, False]
    # Exponential backoff: each ceiling doubles (the jitter draws below it).
    assert ceilings == [0.01, 0.02]


def test_permanent_errors_are_not_retried():
    calls = []

    def broken(ctx, n):
        calls.append(n)
        raise ToolError("bad input")

    outcome = invoker.invoke("t", '{"n": 1}', CTX, _tools(broken))
    assert not outcome.ok and outcome.error == "bad input"
    assert len(calls) == 1 and len(outcome.attempts) == 1


def test_a_tool_bug_is_contained_and_not_retried():
    outcome = invoker.invoke("t", '{"n": 1}', CTX, _tools(lambda ctx, n: 1 / 0))
    assert not outcome.ok
    assert outcome.error_class == "ZeroDivisionError"
    assert len(outcome.attempts) == 1


def test_slow_tools_time_out_and_are_retried():
    outcome = invoker.invoke("t", '{"n": 1}', CTX, _tools(lambda ctx, n: time.sleep(0.3), timeout=0.05))
    assert not outcome.ok
    assert outcome.error_class == "ToolTimeout"
    assert "timed out after 0.05 s" in outcome.error
    assert len(outcome.attempts) == 3  # the default max_attempts


def test_idempotent_results_are_cached():
    calls = []
    tools = _tools(lambda ctx, n: calls.append(n) or n + 1, cache_ttl=60)
    first = invoker.invoke("t", '{"n": 1}', CTX, tools)
    second = invoker.invoke("t", '{"n":1}', CTX, tools)
    third = invoker.invoke("t", '{"n": 2}', CTX, tools)
    assert (first.result, second.result, third.result) == (2, 2, 3)
    assert (first.cached, second.cached, third.cached) == (False, True, False)
    assert calls == [1, 2]


def test_the_breaker_opens_and_stops_calls(settings):
    settings.TOOL_BREAKER_FAILURES = 3
    calls = []

    def down(ctx, n):
        calls.append(n)
        raise ToolError("connection refused", retryable=True)

    tools = _tools(down)
    outcome = invoker.invoke("t", '{"n": 1}', CTX, tools)
    assert len(outcome.attempts) == 3 and CircuitBreaker("t").is_open()
    refused = invoker.invoke("t", '{"n": 1}', CTX, tools)
    assert refused.error_class == "CircuitOpen" and "circuit breaker is open" in refused.error
    assert len(calls) == 3  # the open breaker did not touch the service


def test_an_open_breaker_serves_the_last_result_marked_stale(settings):
    settings.TOOL_BREAKER_FAILURES = 1
    state = {"up": True}

    def service(ctx, n):
        if not state["up"]:
            raise ToolError("503", retryable=True)
        return {"temperature": 21}

    tools = _tools(service)
    assert invoker.invoke("t", '{"n": 1}', CTX, tools).ok
    state["up"] = False
    invoker.invoke("t", '{"n": 1}', CTX, tools)  # fails and opens the breaker
    degraded = invoker.invoke("t", '{"n": 1}', CTX, tools)
    assert degraded.ok and degraded.stale and degraded.result == {"temperature": 21}
    assert degraded.served_by == "stale cache"
    assert degraded.served_by == "stale cache"


def test_an_open_breaker_uses_the_fallback_tool(settings):
    settings.TOOL_BREAKER_FAILURES = 1
    tools = {
        "primary": Tool("primary", "p", SCHEMA, lambda ctx, n: (_ for _ in ()).throw(ToolError("down", retryable=True)),
                        fallback="backup"),
        "backup": Tool("backup", "b", SCHEMA, lambda ctx, n: {"from": "backup", "n": n}),
    }  # fmt: skip
    invoker.invoke("primary", '{"n": 5}', CTX, tools)
    degraded = invoker.invoke("primary", '{"n": 5}', CTX, tools)
    assert degraded.ok and degraded.result == {"from": "backup", "n": 5}
    assert degraded.served_by == "backup"


def test_a_hard_validation_failure_is_a_failed_attempt():
    tools = _tools(
        lambda ctx, n: {"temperature": 80},
        result_rules=({"type": "range", "path": "temperature", "min": -50, "max": 50},),
    )
    outcome = invoker.invoke("t", '{"n": 1}', CTX, tools)
    assert not outcome.ok and outcome.error_class == "ValidationFailed"
    assert "failed validation" in outcome.error and "80" in outcome.error
    assert outcome.validation["status"] == "fail"
    assert len(outcome.attempts) == 1  # a bad value is not transient: no retry


def test_a_transient_validation_failure_takes_the_retry_path():
    statuses = [503, 503, 200]
    tools = _tools(
        lambda ctx, n: {"status": statuses.pop(0)}, result_rules=({"type": "http_status", "allowed": [200]},)
    )
    outcome = invoker.invoke("t", '{"n": 1}', CTX, tools)
    assert outcome.ok and outcome.result == {"status": 200}
    assert [a.error_class for a in outcome.attempts] == ["ValidationFailed", "ValidationFailed", ""]
    assert outcome.validation == {"status": "pass", "checks": outcome.validation["checks"]}


def test_a_soft_rule_only_warns():
    tools = _tools(
        lambda ctx, n: {"words": 0}, result_rules=({"type": "range", "path": "words", "min": 1, "hard": False},)
    )
    outcome = invoker.invoke("t", '{"n": 1}', CTX, tools)
    assert outcome.ok and outcome.validation["status"] == "pass"
    assert [c["ok"] for c in outcome.validation["checks"]] == [False]  # the warning stays in the trace


class _CountingCache:
    """The real cache, with a record of which of its operations the breaker used."""

    def __init__(self, real):
        self.real, self.used = real, []

    def __getattr__(self, name):
        self.used.append(name)
        return getattr(self.real, name)


def test_a_healthy_tool_costs_one_cache_read_and_no_write(monkeypatch):
    from django.core.cache import cache

    from feedback.agent import breaker

    counting = _CountingCache(cache)
    monkeypatch.setattr(breaker, "cache", counting)
    for n in range(3):
        assert invoker.invoke("t", f'{{"n": {n}}}', CTX, _tools(lambda ctx, n: n)).ok
    assert counting.used == ["get_many"] * 3


def test_a_success_resets_the_failures_another_worker_recorded():
    elsewhere = CircuitBreaker("t")  # the same shared keys, as another process sees them
    elsewhere.record_failure()
    elsewhere.record_failure()
    assert invoker.invoke("t", '{"n": 1}', CTX, _tools(lambda ctx, n: n)).ok
    assert elsewhere.failures() == 0 and elsewhere.state() == "closed"


def test_a_success_after_retries_resets_the_failures_it_recorded():
    calls = []

    def flaky(ctx, n):
        calls.append(n)
        if len(calls) < 3:
            raise ToolError("busy", retryable=True)
        return n

    assert invoker.invoke("t", '{"n": 1}', CTX, _tools(flaky)).ok
    assert len(calls) == 3 and CircuitBreaker("t").failures() == 0
