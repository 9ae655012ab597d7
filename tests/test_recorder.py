"""The recorder writes each step whole, under the worker's lease, at the index it counted, with
the run's counters in the same transaction: they always equal the run's steps."""

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from feedback.agent.invoker import Attempt
from feedback.agent.lease import LeaseLost
from feedback.agent.llm import LLMAttempt
from feedback.agent.recorder import Recorder
from feedback.models import Run, Step, StepAttempt
from feedback.privacy import email_pseudonym

from .factories import make_run

pytestmark = pytest.mark.django_db

LEASE = "worker-a"


@pytest.fixture
def run():
    return make_run(status=Run.Status.RUNNING, worker=LEASE)


def test_a_step_and_its_attempts_are_written_together(run):
    started = timezone.now() - timedelta(seconds=2)
    tries = [
        Attempt(1, started, 900, "mail to ann@example.com timed out", "ToolTimeout", True),
        Attempt(2, started + timedelta(seconds=1), 40),
    ]
    record = Recorder(run, LEASE)
    step = record.step(
        tries, turn=1, kind=Step.Kind.TOOL_CALL, tool_name="send", tool_call_id="c1",
        arguments={"to": "ann@example.com", "n": 1.5}, result={"ok": True}, success=True, tokens_in=7,
    )  # fmt: skip
    stored = Step.objects.get(pk=step.pk)
    assert (stored.index, stored.turn, stored.kind, stored.attempts) == (0, 1, "tool_call", 2)
    assert stored.arguments == {"to": email_pseudonym("ann@example.com"), "n": 1.5} == step.arguments
    assert stored.result == {"ok": True} and stored.success is True and stored.validation is None
    rows = list(StepAttempt.objects.filter(step=stored).values("number", "error", "error_class", "retryable"))
    assert rows == [
        {"number": 1, "error": f"mail to {email_pseudonym('ann@example.com')} timed out",
         "error_class": "ToolTimeout", "retryable": True},
        {"number": 2, "error": "", "error_class": "", "retryable": False},
    ]  # fmt: skip
    # The run's counters are written with the step.
    assert Run.objects.values_list("step_count", "tokens_in").get(pk=run.pk) == (1, 7)
    record.update_run(status=Run.Status.SUCCEEDED)
    run.refresh_from_db()
    assert (run.step_count, run.tokens_in, run.status) == (1, 7, Run.Status.SUCCEEDED)


def test_a_call_that_succeeded_at_once_is_its_own_record(run):
    # Attempt rows are kept once an attempt failed (as above); a clean call is its step.
    step = Recorder(run, LEASE).step(
        [Attempt(1, timezone.now(), 3)], turn=1, kind=Step.Kind.TOOL_CALL, tool_name="noop", success=True
    )
    assert Step.objects.get(pk=step.pk).attempts == 1 and not StepAttempt.objects.filter(step=step).exists()
    failed = Recorder(run, LEASE).step(
        [Attempt(1, timezone.now(), 3, "no such file", "ToolError")], turn=2, kind=Step.Kind.TOOL_CALL, success=False
    )
    assert list(failed.attempt_rows.values_list("number", "error")) == [(1, "no such file")]


def _sample(field):
    """A value for ``field`` that is not its default."""
    if field.choices:
        return field.choices[-1][0]
    return {
        "CharField": "c" * 7,
        "TextField": "some text",
        "PositiveIntegerField": 7,
        "PositiveSmallIntegerField": 3,
        "BooleanField": True,
        "DateTimeField": datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=UTC),
        "JSONField": {"k": [1, 2.5, None, "v"]},
        "FloatField": 0.25,
    }[field.get_internal_type()]


@pytest.mark.parametrize("model", [Step, StepAttempt])
def test_every_field_of_a_step_and_its_attempts_is_stored(run, model):
    # The cost is the recorder's to work out (tests/test_costs.py), not a value passed in.
    fields = [f for f in model._meta.concrete_fields if f.name not in ("id", "run", "index", "step", "cost")]
    values = {f.name: _sample(f) for f in fields}
    if model is Step:
        step = Recorder(run, LEASE).step(**values)
        stored = Step.objects.get(pk=step.pk)
    else:
        attempt = Attempt(values["number"], values["started_at"], values["duration_ms"], values["error"],
                          values["error_class"], values["retryable"])  # fmt: skip
        step = Recorder(run, LEASE).step([attempt], turn=1, kind=Step.Kind.TOOL_CALL)
        stored = StepAttempt.objects.get(step=step)
    assert {f.name: getattr(stored, f.name) for f in fields} == values


def test_a_model_call_s_attempts_are_recorded_as_llm_errors(run):
    step = Recorder(run, LEASE).step(
        [LLMAttempt(1, timezone.now(), 5, "503 from the model", True)], turn=1, kind=Step.Kind.MODEL_ERROR,
        success=False, error="gave up",
    )  # fmt: skip
    assert list(step.attempt_rows.values_list("error_class", flat=True)) == ["LLMError"]
    assert Step.objects.get(pk=step.pk).result is None  # SQL NULL, as the ORM writes None


def test_indices_are_contiguous_and_the_counter_follows(run):
    record = Recorder(run, LEASE)
    steps = [record.step(turn=1, kind=Step.Kind.THOUGHT, thought=f"t{i}") for i in range(4)]
    assert [s.index for s in steps] == [0, 1, 2, 3]
    assert list(run.steps.order_by("index").values_list("thought", flat=True)) == ["t0", "t1", "t2", "t3"]
    assert record.step_count == 4 == Run.objects.get(pk=run.pk).step_count
    # Another worker resuming the run counts from the steps, whatever the run row says.
    Run.objects.filter(pk=run.pk).update(step_count=1, tokens_in=0)
    assert Recorder(run, LEASE).progress() == 4
    resumed = Recorder(run, LEASE)
    assert resumed.step(turn=2, kind=Step.Kind.THOUGHT, thought="t4", tokens_in=5).index == 4
    assert Run.objects.values_list("step_count", "tokens_in").get(pk=run.pk) == (5, 5)


def test_a_worker_that_lost_its_lease_cannot_write(run):
    record = Recorder(run, LEASE)
    record.step(turn=1, kind=Step.Kind.THOUGHT, thought="mine")
    Run.objects.filter(pk=run.pk).update(worker="worker-b")  # the reaper gave the run away
    with pytest.raises(LeaseLost):
        record.step(turn=2, kind=Step.Kind.THOUGHT, thought="too late")
    assert list(run.steps.values_list("thought", flat=True)) == ["mine"]
    with pytest.raises(LeaseLost):
        record.update_run(status=Run.Status.SUCCEEDED)


def test_a_run_that_is_no_longer_running_takes_no_step(run):
    Run.objects.filter(pk=run.pk).update(status=Run.Status.CANCELLED)
    with pytest.raises(LeaseLost):
        Recorder(run, LEASE).step(turn=1, kind=Step.Kind.THOUGHT, thought="x")
    assert not run.steps.exists()


def test_the_steps_of_a_turn_and_the_run_s_end_are_written_in_one_transaction(run):
    record = Recorder(run, LEASE)
    record.start_fresh()
    record.step(turn=1, kind=Step.Kind.THOUGHT, thought="first")  # and the model's price, read once a run
    entries = [([], {"turn": 1, "kind": Step.Kind.TOOL_CALL, "tool_name": "a", "tokens_in": 3}),
               ([Attempt(1, timezone.now(), 5, "boom", "ToolError")],
                {"turn": 1, "kind": Step.Kind.TOOL_CALL, "tool_name": "b", "success": False})]  # fmt: skip
    steps = record.write(entries, run_fields={"status": Run.Status.FAILED, "error": "mail ann@example.com"})
    assert [s.index for s in steps] == [1, 2] and record.step_count == 3
    stored = Run.objects.get(pk=run.pk)
    assert (stored.step_count, stored.tokens_in, stored.status) == (3, 3, Run.Status.FAILED)
    assert stored.error == f"mail {email_pseudonym('ann@example.com')}" == record.run.error
    assert list(StepAttempt.objects.filter(step=steps[1]).values_list("error", flat=True)) == ["boom"]


def test_an_unknown_field_is_refused_before_anything_is_written(run):
    record = Recorder(run, LEASE)
    with pytest.raises(TypeError):
        record.step(turn=1, kind=Step.Kind.THOUGHT, mood="cheerful")
    assert not run.steps.exists() and not record.step_count


@pytest.mark.postgresql
def test_an_overlong_value_is_refused_not_cut(run):
    from django.db import DataError, transaction

    record = Recorder(run, LEASE)
    with pytest.raises(DataError), transaction.atomic():
        record.step(turn=1, kind=Step.Kind.TOOL_CALL, error_class="E" * 101)
    assert record.step_count == 0 and not run.steps.exists()


EMBEDDED_RUN = """
import json, django
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
from feedback.agent.loop import execute_run
from feedback.models import Run, StepAttempt, Task
task = Task.objects.create(text="What is (17 * 23 + 4) / 5?", kind=Task.Kind.ARITHMETIC)
run = Run.objects.create(task=task, task_kind=task.kind)
execute_run(run.pk)
run.refresh_from_db()
print(json.dumps({
    "status": run.status, "output": run.final_output, "step_count": run.step_count,
    "indices": list(run.steps.values_list("index", flat=True)),
    "attempts": StepAttempt.objects.filter(step__run=run).count(),
}))
"""


def test_a_run_completes_on_the_embedded_database(tmp_path):
    # The embedded default: the same ORM writes, on SQLite.
    env = {"PATH": "/usr/bin:/bin", "DJANGO_SETTINGS_MODULE": "agentsite.settings", "VAR_DIR": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", EMBEDDED_RUN], cwd=settings.BASE_DIR, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["status"] == "succeeded" and seen["output"].endswith("= 79")
    assert seen["indices"] == list(range(seen["step_count"])) and seen["step_count"] >= 2
    assert seen["attempts"] == 0  # the calculator answered at once: its step is its record


def _in_thread(work):
    """Run ``work`` in a thread of its own (so on a connection of its own)."""
    import threading

    from django.db import connection

    done = {}

    def target():
        try:
            done["result"] = work()
        finally:
            connection.close()

    thread = threading.Thread(target=target)
    thread.start()
    return thread, done


@pytest.mark.django_db(transaction=True)
def test_a_step_write_waits_for_whoever_takes_the_run_and_then_stops():
    # The reaper's UPDATE holds the run's row until it commits; a write started meanwhile waits
    # for that commit and then finds the run no longer its worker's.
    import threading

    from django.db import transaction

    run = make_run(status=Run.Status.RUNNING, worker=LEASE)
    record = Recorder(run, LEASE)
    record.step(turn=1, kind=Step.Kind.THOUGHT, thought="mine")
    taken, order = threading.Event(), []

    def reaper():
        with transaction.atomic():
            Run.objects.filter(pk=run.pk).update(status=Run.Status.QUEUED, worker="")
            taken.set()
            threading.Event().wait(0.5)  # long enough for the write below to be waiting
            order.append("reaper committed")

    thread, _ = _in_thread(reaper)
    assert taken.wait(10)
    with pytest.raises(LeaseLost):
        record.step(turn=2, kind=Step.Kind.THOUGHT, thought="too late")
    order.append("write refused")
    thread.join(10)
    assert order == ["reaper committed", "write refused"]
    assert list(run.steps.values_list("thought", flat=True)) == ["mine"]


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
def test_the_reaper_waits_for_a_step_write_in_flight_and_leaves_the_run_to_its_worker(settings):
    import threading
    from datetime import timedelta

    from django.db import transaction

    from feedback.agent.checkpoint import reap_stale_runs

    settings.RUN_STALE_AFTER_SECONDS = 60
    run = make_run(status=Run.Status.RUNNING, worker=LEASE, heartbeat_at=timezone.now() - timedelta(minutes=5))
    record = Recorder(run, LEASE)
    record.start_fresh()
    with transaction.atomic():
        record._write_steps(
            [(Step(run=run, index=0, turn=1, kind=Step.Kind.THOUGHT, thought="mine"), [])], {"step_count": 1}
        )
        # The reaper saw the run as stale (this write is not committed yet) and waits on its row.
        thread, done = _in_thread(reap_stale_runs)
        threading.Event().wait(0.5)
        assert thread.is_alive()
    thread.join(10)
    assert done["result"] == []
    assert Run.objects.values_list("status", "worker", "step_count").get(pk=run.pk) == (Run.Status.RUNNING, LEASE, 1)


@pytest.mark.django_db(transaction=True)
def test_the_heartbeat_keeps_the_lease_alive(settings):
    import time

    from feedback.agent.lease import Heartbeat

    settings.RUN_HEARTBEAT_SECONDS = 0.1
    run = make_run(status=Run.Status.RUNNING, worker=LEASE)
    beaten = Run.objects.get(pk=run.pk).heartbeat_at
    heartbeat = Heartbeat(run.pk, LEASE)
    heartbeat.start()
    try:
        deadline = time.monotonic() + 10 * settings.RUN_HEARTBEAT_SECONDS
        while Run.objects.get(pk=run.pk).heartbeat_at == beaten and time.monotonic() < deadline:
            time.sleep(0.05)
        assert Run.objects.get(pk=run.pk).heartbeat_at != beaten
    finally:
        heartbeat.stop()
        heartbeat.join(5)


@pytest.mark.django_db(transaction=True)
def test_a_write_whose_commit_was_not_acknowledged_is_found_not_written_twice(monkeypatch):
    from django.db import OperationalError

    from feedback.agent import recorder

    monkeypatch.setattr(recorder, "DB_RETRY_SECONDS", 0)
    run = make_run(status=Run.Status.RUNNING, worker=LEASE)
    record = Recorder(run, LEASE)
    record.start_fresh()
    write = Recorder._write_steps
    calls = []

    def committed_then_dropped(self, pending, run_fields):
        calls.append(1)
        write(self, pending, run_fields)
        if len(calls) == 1:
            raise OperationalError("server closed the connection unexpectedly")  # after the COMMIT
        raise AssertionError("written again")

    monkeypatch.setattr(Recorder, "_write_steps", committed_then_dropped)
    entries = [([], {"turn": 1, "kind": Step.Kind.TOOL_CALL, "tool_name": n}) for n in ("a", "b")]
    steps = record.write(entries, run_fields={"status": Run.Status.SUCCEEDED})
    assert [(s.index, s.tool_name) for s in steps] == [(0, "a"), (1, "b")] and all(s.pk for s in steps)
    assert list(run.steps.order_by("index").values_list("tool_name", flat=True)) == ["a", "b"]
    assert (record.step_count, record.run.status) == (2, Run.Status.SUCCEEDED)
