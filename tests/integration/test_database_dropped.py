"""The database connection dropped during a step write: the step is written once, on a fresh
connection, or the run fails cleanly; a step is never half-written and never written twice.

The connection is really dropped: the backend serving it is terminated in PostgreSQL
(pg_terminate_backend), exactly what a server restart or a failover does to a client.
"""

import time

import psycopg
import pytest
from django.db import OperationalError, connection

from feedback.agent.llm import LLMReply, ToolCall
from feedback.agent.loop import execute_run
from feedback.models import Run, Step, StepAttempt

from ..factories import make_run
from ..fake_openai import FakeOpenAI
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
    return "feedback_write_step(" in sql


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


def test_a_commit_whose_acknowledgement_is_lost_is_not_written_twice():
    run = make_run(text="Add numbers")
    count = {"n": 0}

    def lose_acknowledgement(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if _is_step_write(sql):
            count["n"] += 1
            if count["n"] == 2:
                # The write committed (a statement alone is its own transaction), then the
                # client sees the connection fail before it reads the answer.
                raise OperationalError("connection lost after commit")
        return result

    with connection.execute_wrapper(lose_acknowledgement):
        execute_run(run.pk, model=Sums(turns=2))
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED
    _assert_whole(run)
    assert run.steps.count() == run.step_count == 3


def test_a_database_that_stays_away_fails_the_run_cleanly():
    run = make_run(text="Add numbers")
    with _cut_on_writes(*range(2, 100)):
        execute_run(run.pk, model=Sums())
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED
    assert run.error.startswith("Internal error: OperationalError")
    assert run.finished_at is not None and run.worker
    steps = _assert_whole(run)
    assert len(steps) == 1  # the first write went through; none of the failed ones left a trace


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
