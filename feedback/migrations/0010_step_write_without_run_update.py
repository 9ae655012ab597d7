"""feedback_write_step, second version: a step write no longer updates its run's row.

The first version (0007) claimed the step's index by incrementing the run's counter, which also
held the run row's lock until the commit so that the reaper could not take the run away in the
middle of a write. That UPDATE wrote a new version of the run row, and logged it, at every step:
a third of the write's time.

Now:
- The worker sends the index itself. Only the lease holder writes a run's steps, it knows how
  many it wrote, and the unique (run, index) constraint refuses a second step at any index.
- The lease is checked by a plain read, under a shared advisory lock on the run's id
  (``pg_advisory_xact_lock_shared``, held until the commit). Whatever takes a run from its
  worker (the reaper) takes the same lock exclusively first, so it waits for a write in flight,
  and a write that starts after it sees the new owner. Advisory locks live in memory: no row
  version, no log record.
- The run's counters (step_count, tokens) are written by the worker's heartbeat at most once a
  second, and exactly when the run ends or pauses (agent/recorder.py, agent/lease.py).
- Attempt rows are written only when the call had a failed attempt, as model calls already did:
  a call that succeeded at once is its step.

Returns the step's id and the run's cancel flag; no row when the lease is lost.
"""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION feedback_write_step(
    p_run bigint, p_lease text, p_status text, p_index integer, p_step jsonb, p_attempts jsonb
) RETURNS TABLE (new_step_id bigint, run_cancel_requested boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_cancel boolean;
    v_step bigint;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(p_run);
    -- A statement of its own, so its snapshot is taken once the lock is held.
    SELECT r.cancel_requested INTO v_cancel
    FROM feedback_run AS r WHERE r.id = p_run AND r.worker = p_lease AND r.status = p_status;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    INSERT INTO feedback_step (
        run_id, index, turn, kind, thought, tool_name, tool_call_id, arguments, result, error, error_class,
        error_signature, success, cached, stale, served_by, started_at, finished_at, duration_ms, attempts,
        tokens_in, tokens_out, validation_status, validation
    )
    SELECT
        p_run, p_index, s.turn, s.kind, s.thought, s.tool_name, s.tool_call_id, s.arguments, s.result, s.error,
        s.error_class, s.error_signature, s.success, s.cached, s.stale, s.served_by, s.started_at, s.finished_at,
        s.duration_ms, s.attempts, s.tokens_in, s.tokens_out, s.validation_status, s.validation
    FROM jsonb_populate_record(NULL::feedback_step, p_step) AS s
    RETURNING id INTO v_step;
    IF jsonb_array_length(p_attempts) > 0 THEN
        INSERT INTO feedback_stepattempt (step_id, number, started_at, duration_ms, error, error_class, retryable)
        SELECT v_step, a.number, a.started_at, a.duration_ms, a.error, a.error_class, a.retryable
        FROM jsonb_populate_recordset(NULL::feedback_stepattempt, p_attempts) AS a;
    END IF;
    new_step_id := v_step;
    run_cancel_requested := v_cancel;
    RETURN NEXT;
END
$$
"""

DROP = "DROP FUNCTION IF EXISTS feedback_write_step(bigint, text, text, integer, jsonb, jsonb)"


def forwards(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(_previous().DROP)
        schema_editor.execute(CREATE)


def backwards(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)
        schema_editor.execute(_previous().CREATE)


def _previous():
    from importlib import import_module

    return import_module("feedback.migrations.0007_step_write_function")


class Migration(migrations.Migration):
    dependencies = [("feedback", "0009_daily_tool_stats")]

    operations = [migrations.RunPython(forwards, backwards)]
