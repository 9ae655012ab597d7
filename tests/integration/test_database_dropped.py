"""The database connection dropped during a step write: the step is written once, on a fresh
connection, or the run fails cleanly; a step is never half-written and never written twice.

The connection is really dropped: the backend serving it is terminated in PostgreSQL
(pg_terminate_backend), exactly what a server restart or a failover does to a client.
"""

import time

import psycopg
import pytest
from django.db import OperationalError, connection, connections

from feedback.agent.llm import LLMReply, ToolCall
from feedback.agent.loop import execute_run
from feedback.models import Run, Step, StepAttempt

from ..factories import make_run
from ..fake_openai import FakeOpenAI, call, completion
from .test_worker_killed import TURNS, slow_model
from .worker import WorkerProcess, wait_for_run
from .worker import test_database_url as database_url

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _terminate(sql_filter: str, *params) -> int:
    """Terminate PostgreSQL backends from a separate connection; wait until they are gone."""
    with psycopg.connect(database_url(), autocommit=True) as admin:
        rows = admin.execute(
            f"SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE {sql_filter}", params
        ).fetchall()
    return len(rows)


class Sums:
    """A model that adds numbers, one calculator call per turn, then answers."""

    backend, name = "test", "sums"

    def __init__(self, turns: int = 4) -> None:
        self.turn, self.turns = 0, turns

    def complete(self, messages, tools):
        self.turn += 1
        if self.turn > self.turns:
            return LLMReply(content=f"Computed {self.turns} sums.")
        return LLMReply(tool_calls=[ToolCall(f"c{self.turn}", "calculator", f'{{"expression": "{self.turn} + 100"}}')])


def _is_step_write(sql: str) -> bool:
    return sql.startswith('INSERT INTO "feedback_step"')


def _cut_on_writes(*which: int):
    """The Nth step writes (1-based) find their connection's backend terminated as they are sent."""
    count = {"n": 0}

    def cut(execute, sql, params, many, context):
        if _is_step_write(sql):
            count["n"] += 1
            if count["n"] in which:
                _terminate("pid = %s", context["connection"].connection.info.backend_pid)
        return execute(sql, params, many, context)

    return connection.execute_wrapper(cut)


def _assert_whole(run: Run) -> list[Step]:
    steps = list(run.steps.order_by("index"))
    assert [s.index for s in steps] == list(range(run.step_count))  # contiguous: none half-written
    assert StepAttempt.objects.filter(step__run=run).exclude(step__in=steps).count() == 0
    calls = [s.tool_call_id for s in steps if s.kind == Step.Kind.TOOL_CALL]
    assert len(calls) == len(set(calls))  # none twice
    return steps


def test_a_step_write_that_loses_its_connection_is_retried_once_on_a_new_one():
    run = make_run(text="Add numbers")
    with _cut_on_writes(3, 5):
        execute_run(run.pk, model=Sums())
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED, run.error
    steps = _assert_whole(run)
    assert [s.arguments["expression"] for s in steps if s.kind == Step.Kind.TOOL_CALL] == [
        f"{i} + 100" for i in range(1, 5)
    ]


def test_a_commit_whose_acknowledgement_is_lost_is_not_written_twice(monkeypatch):
    run = make_run(text="Add numbers")
    count = {"n": 0, "step": False}
    backend = type(connections["default"])
    commit = backend._commit

    def note_step_writes(execute, sql, params, many, context):
        count["step"] = count["step"] or _is_step_write(sql)
        return execute(sql, params, many, context)

    def lose_acknowledgement(self):
        commit(self)
        if count["step"]:
            count["n"], count["step"] = count["n"] + 1, False
            if count["n"] == 2:
                # The step committed, then the client sees the connection fail before the answer.
                raise OperationalError("connection lost after commit")

    monkeypatch.setattr(backend, "_commit", lose_acknowledgement)
    with connection.execute_wrapper(note_step_writes):
        execute_run(run.pk, model=Sums(turns=2))
    run.refresh_from_db()
    assert count["n"] >= 2, "the second step's commit was never reached"
    assert run.status == Run.Status.SUCCEEDED
    _assert_whole(run)
    # Two turns of a model call and a calculator call, then the answer.
    assert run.steps.count() == run.step_count == 5


def test_a_database_that_stays_away_fails_the_run_cleanly():
    run = make_run(text="Add numbers")
    with _cut_on_writes(*range(2, 100)):
        execute_run(run.pk, model=Sums())
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED
    assert run.error.startswith("Internal error: OperationalError")
    assert run.finished_at is not None and run.worker
    steps = _assert_whole(run)
    # The first write went through (the first model call's step and its calculator call's); none
    # of the failed ones left a trace.
    assert len(steps) == 2


def test_a_real_worker_survives_its_connections_being_cut_mid_run(shared_folders):
    app = f"relw-cut-{time.monotonic_ns()}"
    with FakeOpenAI() as endpoint:
        endpoint.responder = slow_model
        worker = WorkerProcess(
            shared_folders, "cut", LLM_BACKEND="openai", OPENAI_BASE_URL=endpoint.base_url, OPENAI_API_KEY="test",
            DATABASE_URL=f"{database_url()}?application_name={app}", RUN_HEARTBEAT_SECONDS="0.3",
        ).start()  # fmt: skip
        try:
            run = make_run(text="Add up numbers")
            from feedback.tasks import run_execute_task

            run_execute_task.delay(run.pk)
            cuts, deadline = 0, time.monotonic() + 60
            for wanted in (2, 4, 6):
                while Run.objects.get(pk=run.pk).step_count < wanted:
                    assert time.monotonic() < deadline, worker.log()
                    time.sleep(0.05)
                time.sleep(0.15)  # inside the model call or the next write
                cuts += _terminate("application_name = %s", app)
            run = wait_for_run(run.pk, timeout=60)
        finally:
            worker.stop()
    assert cuts >= 3, "the worker's connections were never cut"
    assert run.status == Run.Status.SUCCEEDED, worker.log()
    assert run.final_output == f"Computed {TURNS} sums."
    steps = _assert_whole(run)
    expressions = [s.arguments["expression"] for s in steps if s.kind == Step.Kind.TOOL_CALL]
    assert expressions == [f"{i} + 1000" for i in range(TURNS)]


def _planning_model(body):
    """A plan, four sums, the plan completed, the answer: every kind of write under the lease."""
    done = sum(1 for m in body["messages"] if m["role"] == "tool")
    plan = [{"title": "Add the numbers", "status": "in_progress"}, {"title": "Answer", "status": "pending"}]
    if done == 0:
        reply = completion(tool_calls=[call("update_plan", {"steps": plan}, id="p0")])
    elif done <= 4:
        reply = completion(tool_calls=[call("calculator", {"expression": f"{done} + 1000"}, id=f"c{done}")])
    elif done == 5:
        completed = [{**item, "status": "completed"} for item in plan]
        reply = completion(tool_calls=[call("update_plan", {"steps": completed}, id="p5")])
    else:
        reply = completion("Computed 4 sums.")
    return {"json": reply, "delay": 0.25}


def test_connections_cut_under_many_runs_fail_none_and_leave_counters_equal_to_the_steps(shared_folders):
    app = f"relw-sweep-{time.monotonic_ns()}"
    runs_wanted = 24
    with FakeOpenAI() as endpoint:
        endpoint.responder = _planning_model
        worker = WorkerProcess(
            shared_folders, "sweep", concurrency=runs_wanted, LLM_BACKEND="openai", OPENAI_BASE_URL=endpoint.base_url,
            OPENAI_API_KEY="test", DATABASE_URL=f"{database_url()}?application_name={app}", RUN_HEARTBEAT_SECONDS="0.3",
        ).start()  # fmt: skip
        try:
            from feedback.tasks import run_execute_task

            runs = [make_run(text=f"Add up numbers #{i}") for i in range(runs_wanted)]
            for run in runs:
                run_execute_task.delay(run.pk)
            ids = [run.pk for run in runs]
            deadline = time.monotonic() + 60
            while Run.objects.filter(pk__in=ids, step_count__gte=1).count() < runs_wanted:
                assert time.monotonic() < deadline, worker.log()
                time.sleep(0.05)
            cuts = 0
            for _sweep in range(3):
                cuts += _terminate("application_name = %s", app)
                time.sleep(0.6)  # a model call or two, then the next sweep
            finished = [wait_for_run(pk, timeout=90) for pk in ids]
        finally:
            worker.stop()
    assert cuts >= runs_wanted, "the sweeps cut too few connections"
    assert [r.status for r in finished] == [Run.Status.SUCCEEDED] * runs_wanted, worker.log()
    for run in finished:
        steps = _assert_whole(run)
        assert run.step_count == len(steps)
        assert (run.tokens_in, run.tokens_out) == (sum(s.tokens_in for s in steps), sum(s.tokens_out for s in steps))
        assert [s.arguments["expression"] for s in steps if s.tool_name == "calculator"] == [
            f"{i} + 1000" for i in range(1, 5)
        ]
        assert [item["status"] for item in run.plan] == ["completed", "completed"]
