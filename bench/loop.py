"""Benchmark 1: what the engine adds to each model call, with the model and the tool taking no
time: runs of 10 model calls through ``execute_run`` (claim, lease, heartbeat thread, strategy
selection, the conversation, the tool invoker with its schema check, shared breaker and thread
pool, each step written with the run's counters under the lease, the run's end), each followed by
the evaluation it queues (``evaluate_run``: the evaluators, the score and outcome),
as the worker would run it, the run and its evaluation timed apart. Per model call: the run
alone (against LangGraph), and both together against the 100 ms a fast model takes to answer.

For reference, in the same process and database: one bare committed ``INSERT`` of a step row, and
LangGraph's ReAct agent with its PostgreSQL checkpointer on the same workload, checkpointing every
super-step (its default) or only when the run exits (``durability="exit"``).
"""

import statistics
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
from feedback.evaluation.chain import evaluate_run
from feedback.models import Run, Task

BENCH_TASK = "Call noop until told to stop."
# What a fast hosted model takes for one reply; the engine's share of a step is measured against it.
MODEL_CALL_MS = 100.0


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
            return LLMReply(content="Done: every noop call succeeded.")
        return LLMReply(tool_calls=[ToolCall(id=f"call-{done}", name="noop", arguments="{}")])


def _new_run() -> Run:
    task = Task.objects.create(text=BENCH_TASK, kind=Task.Kind.GENERAL)
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


def run_and_evaluation_seconds(steps: int) -> tuple[float, float]:
    """Seconds for one ``steps``-step run through the real engine, then for its evaluation."""
    run = _new_run()
    # ``steps`` model calls: each but the last with its noop call (a step each: 2 * steps - 1).
    with override_settings(AGENT_MAX_STEPS=2 * steps):
        started = time.perf_counter()
        execute_run(run.pk, model=ZeroLatencyModel(steps), tools={"noop": NOOP_TOOL})
        ran = time.perf_counter()
        evaluate_run(run.pk)
        evaluated = time.perf_counter()
    run.refresh_from_db()
    if run.status != Run.Status.SUCCEEDED or run.step_count != 2 * steps - 1 or run.score is None:
        raise RuntimeError(f"bench run ended {run.status} with {run.step_count} steps: {run.error}")
    return ran - started, evaluated - ran


def langgraph_seconds(steps: int, runs: int, database_url: str, durability: str | None) -> float | None:
    """Median seconds per ``steps``-step run of LangGraph's ReAct agent; None if not installed."""
    try:
        from bench.langgraph_peer import run_react_agent
    except ImportError:
        return None
    run_react_agent(steps, database_url, thread_id=f"bench-{uuid.uuid4().hex}", durability=durability)  # warm-up
    return statistics.median(
        run_react_agent(steps, database_url, thread_id=f"bench-{uuid.uuid4().hex}", durability=durability)
        for _ in range(runs)
    )


def run(*, database_url: str, steps: int = 10, runs: int = 30, inserts: int = 500) -> list[Result]:
    run_and_evaluation_seconds(steps)  # warms imports, caches and connections
    timed = [run_and_evaluation_seconds(steps) for _ in range(runs)]
    engine = statistics.median(ran for ran, _ in timed)
    evaluation = statistics.median(evaluated for _, evaluated in timed)
    both = statistics.median(ran + evaluated for ran, evaluated in timed)
    insert = bare_insert_seconds(inserts)
    # Per model call: a run of N steps makes N model calls (N - 1 tool calls, then the answer).
    note = f"median of {runs} runs"
    results = [
        Result("loop", "bare INSERT of a step row (reference)", insert * 1000, "ms"),
        Result(
            "loop",
            f"engine per model call ({steps}-step runs, their evaluation included), against a"
            f" {MODEL_CALL_MS:g} ms model call",
            both * 1000 / steps,
            "ms",
            MODEL_CALL_MS,
            target=0.02,
            note=note,
        ),
        Result("loop", f"engine per model call ({steps}-step runs, evaluation excluded)", engine * 1000 / steps, "ms",
               note=note),
        Result("loop", f"evaluation per run (evaluate_run after each {steps}-step run)", evaluation * 1000, "ms",
               note=f"{note}; {evaluation * 1000 / steps:.2f} ms per model call"),
    ]  # fmt: skip
    for durability, label in ((None, "every super-step checkpointed"), ("exit", 'durability="exit"')):
        peer = langgraph_seconds(steps, runs, database_url, durability)
        value = None if peer is None else peer * 1000 / steps
        note = "" if peer is not None else "not installed (requirements-bench.txt)"
        results.append(
            Result("loop", f"LangGraph ReAct + PostgresSaver per model call ({label})", value, "ms", note=note)
        )
        if peer is not None:
            # Issue 24's target: the engine, evaluation excluded, against LangGraph checkpointing
            # every super-step; durability="exit" (nothing written until the run ends) for reference.
            results.append(
                Result(
                    "loop", f"engine, evaluation excluded / LangGraph ({label})", engine / peer, "x", 1.0,
                    target=1.0 if durability is None else None,
                )
            )  # fmt: skip
    Run.objects.filter(task__text=BENCH_TASK).delete()
    return results
