"""A real Celery worker (--pool threads) calls an MCP server's tools: the server is started by
the worker, in the run's sandbox, and does not outlive the run."""

import pytest

from feedback.models import Run, Step, Task

from ..conftest import mcp_server_processes, register_mcp_server
from ..factories import make_run
from ..fake_openai import FakeOpenAI, call, completion
from .worker import WorkerProcess, wait_for_run

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def model(body):
    """Stateless, like a real model: add, then write the sum down, then answer."""
    results = [m["content"] for m in body["messages"] if m["role"] == "tool"]
    if not results:
        return {"json": completion(tool_calls=[call("team__add", {"a": 20, "b": 22}, id="c1")])}
    if len(results) == 1:
        return {"json": completion(tool_calls=[call("team__write_note", {"name": "sum.txt", "text": "42"}, id="c2")])}
    return {"json": completion("20 + 22 = 42, written to sum.txt")}


def test_a_worker_process_calls_an_mcp_tool_and_leaves_no_server_process(shared_folders):
    register_mcp_server("team")
    with FakeOpenAI() as endpoint:
        endpoint.responder = model
        worker = WorkerProcess(
            shared_folders, "mcp", LLM_BACKEND="openai", OPENAI_BASE_URL=endpoint.base_url, OPENAI_API_KEY="test",
            TOOL_RETRIEVAL_THRESHOLD="100",
        ).start()  # fmt: skip
        try:
            from feedback.tasks import run_execute_task

            run = make_run(text="Add 20 and 22 and write the sum down", kind=Task.Kind.GENERAL)
            run_execute_task.delay(run.pk)
            run = wait_for_run(run.pk)
            left = mcp_server_processes(worker.process.pid)  # while the worker still runs
        finally:
            worker.stop()

    assert run.status == Run.Status.SUCCEEDED, (run.error, worker.log())
    added, written = run.steps.filter(kind=Step.Kind.TOOL_CALL).order_by("index")
    assert (added.tool_name, added.success, added.result) == ("team__add", True, {"result": 42})
    assert written.success, written.error
    note = shared_folders / "runs" / str(run.pk) / "sum.txt"  # the server ran in the run's sandbox
    assert note.read_text() == "42"
    assert left == []  # no server process (nor zombie) left under the worker
