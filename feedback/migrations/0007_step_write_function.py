"""feedback_write_step: the agent's step write as one PostgreSQL function (PostgreSQL only).

Under the lease, it counts the step on its run (the UPDATE locks the run row until the commit,
so indices stay contiguous), inserts the step at the index that gives and its attempt rows, and
returns the step's id and index with the run's cancel flag; no row when the lease is lost.

Why a function: PL/pgSQL keeps its statements' plans for the session, where the same statement
sent as text was parsed and planned again at every step: a third of the write's time.
It is not a prepared statement: connection poolers that share server sessions (which is why
Django leaves prepared statements off) cannot break it.

The step and its attempts arrive as JSON documents read into rows of their tables
(jsonb_populate_record), so each value is typed by its column. The column lists below must name
every column of feedback_step and feedback_stepattempt: a migration that adds a column to either
replaces this function too (tests/test_recorder.py writes every field and reads it back).

SQLite (the embedded default) has no such functions: there the recorder writes in a transaction.
"""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION feedback_write_step(
    p_run bigint, p_lease text, p_status text, p_now timestamptz, p_tokens_in integer, p_tokens_out integer,
    p_step jsonb, p_attempts jsonb
) RETURNS TABLE (new_step_id bigint, new_step_index integer, run_cancel_requested boolean)
LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY
    WITH claimed AS (
        UPDATE feedback_run AS r
        SET step_count = r.step_count + 1, heartbeat_at = p_now,
            tokens_in = r.tokens_in + p_tokens_in, tokens_out = r.tokens_out + p_tokens_out
        WHERE r.id = p_run AND r.worker = p_lease AND r.status = p_status
        RETURNING r.step_count, r.cancel_requested
    ), written AS (
        INSERT INTO feedback_step (
            run_id, index, turn, kind, thought, tool_name, tool_call_id, arguments, result, error, error_class,
            error_signature, success, cached, stale, served_by, started_at, finished_at, duration_ms, attempts,
            tokens_in, tokens_out, validation_status, validation
        )
        SELECT
            p_run, claimed.step_count - 1, s.turn, s.kind, s.thought, s.tool_name, s.tool_call_id, s.arguments,
            s.result, s.error, s.error_class, s.error_signature, s.success, s.cached, s.stale, s.served_by,
            s.started_at, s.finished_at, s.duration_ms, s.attempts, s.tokens_in, s.tokens_out,
            s.validation_status, s.validation
        FROM claimed, jsonb_populate_record(NULL::feedback_step, p_step) AS s
        RETURNING feedback_step.id, feedback_step.index
    ), tries AS (
        INSERT INTO feedback_stepattempt (step_id, number, started_at, duration_ms, error, error_class, retryable)
        SELECT written.id, a.number, a.started_at, a.duration_ms, a.error, a.error_class, a.retryable
        FROM written, jsonb_populate_recordset(NULL::feedback_stepattempt, p_attempts) AS a
    )
    SELECT written.id, written.index, claimed.cancel_requested FROM written, claimed;
END
$$
"""

DROP = "DROP FUNCTION IF EXISTS feedback_write_step(bigint, text, text, timestamptz, integer, integer, jsonb, jsonb)"


def create(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def drop(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [("feedback", "0006_bench_daily_stats_and_indexes")]

    operations = [migrations.RunPython(create, drop)]
