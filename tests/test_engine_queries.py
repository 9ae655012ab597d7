"""What the engine costs in round trips to the database, pinned (issue 16): the queries of a
run's steps and of its evaluation, on the workload of the loop benchmark (bench/loop.py). Upper
bounds, not timings: a query added back fails here.

Before issue 16 a step cost five round trips (the cancel flag's read, then BEGIN, the run's
row, the step, COMMIT) and the run's end a sixth UPDATE; the evaluation's own part 19 queries.
Issue 24 gave the cancel flag its plain read back: one owner of the run's lifecycle, and a flag
no write has to carry."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from bench.loop import NOOP_TOOL, ZeroLatencyModel, _new_run
from feedback.agent.loop import execute_run
from feedback.evaluation import chain
from feedback.evaluation.profiles import profile_for
from feedback.models import Run

pytestmark = pytest.mark.django_db

STEPS = 10


def _run(settings) -> tuple[Run, list[str]]:
    # STEPS model calls, each but the last with a noop call: every model call is a step too.
    settings.AGENT_MAX_STEPS = 2 * STEPS
    run = _new_run()
    with CaptureQueriesContext(connection) as queries:
        execute_run(run.pk, model=ZeroLatencyModel(STEPS), tools={"noop": NOOP_TOOL})
    run.refresh_from_db()
    assert (run.status, run.step_count) == (Run.Status.SUCCEEDED, 2 * STEPS - 1), run.error
    return run, [q["sql"] for q in queries.captured_queries]


def test_a_step_costs_one_transaction_of_the_run_s_row_and_the_step(settings):
    _run(settings)  # a process reads the live strategies once, until they change (injection.py)
    _, sql = _run(settings)
    # Per model call: the cancel flag's plain read at the start of its turn (feedback/lifecycle.py),
    # BEGIN (a savepoint inside the test's transaction), the run's row under the lease, its step and
    # its tool call's in one INSERT, COMMIT. Per run: the claim, the run's read, its prompt, the
    # model's price, and at its end (written with its last step) the one UPDATE that withdraws any
    # confirmation still pending.
    assert len(sql) <= 5 + 5 * STEPS, "\n".join(sql)
    assert sum(s.startswith('INSERT INTO "feedback_step"') for s in sql) == STEPS
    assert sum(s.startswith('SELECT "feedback_run"."cancel_requested"') for s in sql) == STEPS  # once a turn
    assert sum(s.startswith('UPDATE "feedback_run"') for s in sql) == 1 + 1 + STEPS  # claim, prompt, steps


def test_an_evaluation_costs_a_few_queries_besides_the_rollups(settings):
    # (Named when the evaluation also counted the run in the metrics' rollups; the metrics now
    # rebuild closed days from the rows, so an evaluation writes no metric bookkeeping at all.)
    run, _ = _run(settings)
    profile_for(run.task_kind)  # made on first use: the benchmark's runs find it made
    with CaptureQueriesContext(connection) as queries:
        chain.evaluate_run(run.pk)
    run.refresh_from_db()
    assert run.score is not None
    # The run with its latest automatic round and its profile; the offline judge's count of the
    # tool calls; then in a transaction (BEGIN and COMMIT, savepoints here): the run's lock, its
    # evaluations, the new round's INSERT, the score and outcome's UPDATE. No metric table is
    # written when a run is scored (feedback/lifecycle.py: the metrics count ended runs' rows).
    assert len(queries) <= 8, "\n".join(q["sql"] for q in queries.captured_queries)
