"""Benchmark 1: what the engine costs per step, with the model and the tool taking no time.

Three figures, measured in the same process against the same database:

- baseline: one bare ``INSERT`` of a step row, committed (autocommit, raw SQL), the mean of a
  batch of them;
- ours: a run of ``steps`` steps through ``execute_run`` (claim, lease, heartbeat thread,
  conversation built from the steps then extended each turn, the tool invoker with its schema
  check, shared breaker and thread pool, each step with its attempt row committed on its own
  under the lease, in one statement that also returns the counter and cancel flag the next turn
  checks), divided by its steps;
- peer: the same workload through LangGraph's ReAct agent with its PostgreSQL checkpointer.
"""

import time
import uuid
from typing import Any

from django.db import connection
from django.test.utils import override_settings
from django.utils import timezone

from bench.results import Result
from feedback.agent.llm import LLMReply, ToolCall
from feedback.agent.loop import execute_run
from feedback.agent.tools import Tool
from feedback.models import Run, Step, Task


def _noop(ctx: Any) -> dict:
    return {"ok": True}


NOOP_TOOL = Tool(
    name="noop",
    description="Do nothing, instantly.",
    parameters={"type": "object", "properties": {}, "additionalProperties": False},
    func=_noop,
    idempotent=False,
)


class ZeroLatencyModel:
    """A ChatModel stand-in: a tool call per turn until ``steps - 1`` calls, then an answer."""

    backend = "bench"
    name = "zero-latency"

    def __init__(self, steps: int, latency: float = 0.0) -> None:
        self.calls = steps - 1
        self.latency = latency  # seconds per call: the worker benchmark simulates a real model

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> LLMReply:
        if self.latency:
            time.sleep(self.latency)
        done = sum(1 for m in messages if m["role"] == "tool")
        if done >= self.calls:
            return LLMReply(content="Done.")
        return LLMReply(tool_calls=[ToolCall(id=f"call-{done}", name="noop", arguments="{}")])


def _new_run() -> Run:
    task = Task.objects.create(text="Call noop until told to stop.", kind=Task.Kind.GENERAL)
    return Run.objects.create(task=task, task_kind=task.kind)


def bare_insert_seconds(count: int) -> float:
    """Seconds per committed single-row INSERT of a step (the floor any persistence pays)."""
    run = _new_run()
    sql = (
        "INSERT INTO feedback_step (run_id, index, turn, kind, thought, tool_name, tool_call_id, error, error_class,"
        " error_signature, cached, stale, served_by, attempts, tokens_in, tokens_out, validation_status,"
        " arguments, result, success, started_at, finished_at, duration_ms)"
        " VALUES (%s, %s, %s, 'tool_call', '', 'noop', %s, '', '', '', false, false, '', 1, 0, 0, '',"
        " '{}'::jsonb, '{\"ok\": true}'::jsonb, true, %s, %s, 0)"
    )
    assert connection.get_autocommit(), "the baseline commits each INSERT on its own"
    with connection.cursor() as cursor:
        for i in range(3):  # warm the connection and the plan cache
            cursor.execute(sql, [run.pk, i, i, f"warm-{i}", timezone.now(), timezone.now()])
        started = time.perf_counter()
        for i in range(3, count + 3):
            now = timezone.now()
            cursor.execute(sql, [run.pk, i, i, f"call-{i}", now, now])
        return (time.perf_counter() - started) / count


def engine_seconds_per_step(steps: int) -> float:
    """Seconds per step of one ``steps``-step run through the real engine."""
    run = _new_run()
    with override_settings(AGENT_MAX_STEPS=steps + 1):
        started = time.perf_counter()
        execute_run(run.pk, model=ZeroLatencyModel(steps), tools={"noop": NOOP_TOOL})
        elapsed = time.perf_counter() - started
    run.refresh_from_db()
    if run.status != Run.Status.SUCCEEDED or run.step_count != steps:
        raise RuntimeError(f"bench run ended {run.status} with {run.step_count} steps: {run.error}")
    return elapsed / steps


def engine_and_insert_seconds(steps: int, repeats: int, inserts: int) -> tuple[float, float]:
    """(engine per step, bare INSERT): ``repeats`` rounds of one of each, taking turns so that a
    passing disturbance (a checkpoint, another process) weighs on both alike; the best of each."""
    engine_seconds_per_step(steps)  # warms imports, caches and connections
    rounds = [(engine_seconds_per_step(steps), bare_insert_seconds(inserts)) for _ in range(repeats)]
    return min(r[0] for r in rounds), min(r[1] for r in rounds)


def langgraph_seconds_per_step(steps: int, repeats: int, database_url: str) -> float | None:
    """The same workload through LangGraph's ReAct agent and PostgresSaver; None if not installed."""
    try:
        from bench.langgraph_peer import run_react_agent
    except ImportError:
        return None
    best = float("inf")
    for n in range(repeats + 1):
        elapsed = run_react_agent(steps, database_url, thread_id=f"bench-{uuid.uuid4().hex}")
        if n:
            best = min(best, elapsed / steps)
    return best


def run(*, database_url: str, steps: int = 50, repeats: int = 3, inserts: int = 500) -> list[Result]:
    ours, insert = engine_and_insert_seconds(steps, repeats, inserts)
    peer = langgraph_seconds_per_step(steps, repeats, database_url)
    Step.objects.filter(run__task__text="Call noop until told to stop.").delete()
    results = [
        Result("loop", "bare INSERT of a step row (baseline)", insert * 1000, "ms", insert * 1000),
        Result("loop", f"engine per step ({steps}-step run)", ours * 1000, "ms", insert * 1000, target=3.0),
    ]
    if peer is None:
        results.append(Result("loop", "LangGraph ReAct + PostgresSaver per step", None, "ms", insert * 1000))
    else:
        results.append(
            Result(
                "loop", f"LangGraph ReAct + PostgresSaver per step ({steps}-step run)", peer * 1000, "ms", insert * 1e3
            )
        )
        results.append(Result("loop", "engine / LangGraph per step", ours / peer, "x", 1.0, target=1.0))
    return results
