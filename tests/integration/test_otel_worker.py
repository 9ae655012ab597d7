"""A real Celery worker exports the runs it executed to a real OTLP/HTTP receiver."""

import pytest

from feedback import services
from feedback.models import Evaluation, Run

from ..conftest import make_user
from ..otlp_receiver import OTLPReceiver
from .worker import WorkerProcess, wait_for_run

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_a_real_worker_exports_the_run_it_executed_once_evaluated(shared_folders):
    receiver = OTLPReceiver().start()
    worker = WorkerProcess(
        shared_folders, "otel", OTEL_EXPORT_RUNS="true", OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
        OTEL_SERVICE_NAME="feedback-worker-test",
    )  # fmt: skip
    try:
        worker.start()
        staff = make_user("otel-staff", "staff")
        run = services.task_submit(user=staff, text="What is (17 * 23 + 4) / 5?", kind="arithmetic")
        run = wait_for_run(run.pk)
        assert run.status == Run.Status.SUCCEEDED, worker.log()

        def root_arrived(spans):
            return any(s.attributes.get("agent_feedback.run.id") == run.pk for s in spans)

        spans = receiver.wait_for(root_arrived, timeout=60)
        [root] = [s for s in spans if s.attributes.get("agent_feedback.run.id") == run.pk]
        run.refresh_from_db()
        # Sent after the evaluation committed: its score, outcome and every evaluator's verdict.
        assert root.attributes["agent_feedback.run.score"] == run.score is not None
        assert root.attributes["agent_feedback.run.outcome"] == run.outcome
        evaluators = {e.evaluator for e in Evaluation.objects.filter(run=run)}
        assert {a["gen_ai.evaluation.name"] for _, a, _ in root.events} == evaluators
        assert root.name == "invoke_agent arithmetic" and root.parent_id == ""
        assert root.resource["service.name"] == "feedback-worker-test"
        children = [s for s in spans if s.trace_id == root.trace_id and s is not root]
        assert {s.parent_id for s in children} == {root.span_id}
        steps = list(run.steps.all())
        tools = sorted(s.attributes["gen_ai.tool.call.id"] for s in children if s.name.startswith("execute_tool"))
        assert tools == sorted(s.tool_call_id for s in steps if s.kind == "tool_call")
        chats = sorted(s.attributes["agent_feedback.turn"] for s in children if s.name.startswith("chat"))
        assert chats == sorted({s.turn for s in steps})
    finally:
        worker.stop()
        receiver.stop()
