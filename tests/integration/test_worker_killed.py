"""A worker SIGKILLed mid-run: another worker finishes the run from its last recorded step."""

import time

import pytest

from feedback.agent.checkpoint import reap_stale_runs
from feedback.models import Run, Step

from ..factories import make_run
from ..fake_openai import FakeOpenAI, call, completion
from .worker import WorkerProcess, wait_for_run

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

TURNS = 8


def slow_model(body):
    """Stateless, like a real model: the reply depends only on the conversation it is sent."""
    done = sum(1 for m in body["messages"] if m["role"] == "tool")
    if done >= TURNS:
        return {"json": completion(f"Computed {done} sums."), "delay": 0.3}
    return {"json": completion(tool_calls=[call("calculator", {"expression": f"{done} + 1000"}, id=f"c{done}")]),
            "delay": 0.3}  # fmt: skip


def test_a_killed_worker_s_run_is_finished_by_another(shared_folders, settings):
    settings.RUN_STALE_AFTER_SECONDS = 2
    with FakeOpenAI() as endpoint:
        endpoint.responder = slow_model
        env = {
            "LLM_BACKEND": "openai",
            "OPENAI_BASE_URL": endpoint.base_url,
            "OPENAI_API_KEY": "test",
            "RUN_HEARTBEAT_SECONDS": "0.5",
        }
        first = WorkerProcess(shared_folders, "doomed", **env).start()
        second = WorkerProcess(shared_folders, "rescuer", **env)
        try:
            run = make_run(text="Add up numbers")
            from feedback.tasks import run_execute_task

            run_execute_task.delay(run.pk)
            deadline = time.monotonic() + 30
            while Run.objects.get(pk=run.pk).step_count < 3:
                assert time.monotonic() < deadline, first.log()
                time.sleep(0.05)
            first.kill()
            killed_at = Run.objects.get(pk=run.pk)
            assert killed_at.status == Run.Status.RUNNING and killed_at.step_count < TURNS

            second.start()
            time.sleep(settings.RUN_STALE_AFTER_SECONDS + 0.5)  # the dead worker's heartbeat goes stale
            assert reap_stale_runs() == [run.pk]
            run = wait_for_run(run.pk, timeout=60)
        finally:
            first.stop()
            second.stop()

    assert run.status == Run.Status.SUCCEEDED, second.log()
    assert run.final_output == f"Computed {TURNS} sums."
    steps = list(run.steps.order_by("index"))
    assert [s.index for s in steps] == list(range(len(steps))) == list(range(run.step_count))
    expressions = [s.arguments["expression"] for s in steps if s.kind == Step.Kind.TOOL_CALL]
    assert expressions == [f"{i} + 1000" for i in range(TURNS)]  # none lost, none twice
