"""OpenTelemetry export of runs, against a real OTLP/HTTP receiver (tests/otlp_receiver.py): the
official SDK's exporter sends real protobuf over real HTTP; nothing of ours is mocked."""

import logging

import pytest

from feedback import otel_export, queue
from feedback.agent.llm import LLMError, LLMReply, ToolCall
from feedback.agent.loop import execute_run
from feedback.evaluation.chain import evaluate_run
from feedback.models import AppliedStrategy, Evaluation, Run, Step, Task
from feedback.privacy import email_pseudonym
from feedback.tasks import run_export_task

from .factories import make_run
from .net import free_port
from .otlp_receiver import OTLPReceiver
from .test_hostile_input import ScriptedModel
from .test_strategy_lifecycle import make_strategy

pytestmark = pytest.mark.django_db

API_KEY = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789"
SENDER = "maria.lopez@example.com"  # in the demo inbox's first email
# Every attribute that carries what a person, the model or a tool wrote.
CONTENT = {
    "input.value", "output.value", "gen_ai.system_instructions", "gen_ai.output.messages",
    "gen_ai.tool.call.arguments", "gen_ai.tool.call.result", "gen_ai.evaluation.explanation",
    "exception.message", "agent_feedback.reflection",
}  # fmt: skip


class Model(ScriptedModel):
    """The scripted stand-in for the LLM, as an OpenAI-compatible endpoint's model."""

    backend, name = "openai", "gpt-test"


@pytest.fixture
def receiver(monkeypatch, settings):
    server = OTLPReceiver().start()
    # The standard variables, read by the SDK's exporter itself.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", server.endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "2")
    settings.OPENAI_API_KEY = API_KEY
    yield server
    server.stop()


def triage_with_a_sub_agent(user=None) -> tuple[Run, Run]:
    """A run reading two emails (one missing), delegating a sum to a sub-agent and answering,
    in two strategies' scope (one active, one on trial); both runs evaluated."""
    from feedback.demo import seed_workspace

    run = make_run(
        user=user, text="Who sent the invoice twice? And what is 6 * 7?", kind=Task.Kind.EMAIL_TRIAGE,
        workspace=seed_workspace(),
    )  # fmt: skip
    model = Model([
        LLMReply(content="Reading both emails.", tokens_in=120, tokens_out=30, tool_calls=[
            ToolCall("call-1", "read_text_file", '{"path": "inbox/001-invoice-twice.txt"}'),
            ToolCall("call-2", "read_text_file", '{"path": "inbox/missing.txt"}'),
        ]),
        LLMReply(content="A sub-agent does the sum.", tokens_in=200, tokens_out=15, tool_calls=[
            ToolCall("call-3", "delegate", '{"task": "What is 6 * 7?", "kind": "arithmetic"}'),
        ]),
        LLMReply(content=f"{SENDER} sent it twice; 6 * 7 = 42. (Key seen: {API_KEY})", tokens_in=300, tokens_out=40),
    ])  # fmt: skip
    execute_run(run.pk, model=model)
    active, trial = make_strategy(status="active"), make_strategy(status="trial")
    AppliedStrategy.objects.create(run=run, strategy_version=active.current_version, arm="active")
    AppliedStrategy.objects.create(run=run, strategy_version=trial.current_version, arm="treatment")
    child = Run.objects.get(parent=run)
    evaluate_run(child.pk)
    evaluate_run(run.pk)
    run.refresh_from_db()
    child.refresh_from_db()
    assert run.status == child.status == Run.Status.SUCCEEDED
    return run, child


def by_name(spans) -> dict[str, list]:
    named: dict[str, list] = {}
    for span in spans:
        named.setdefault(span.name, []).append(span)
    return named


def test_a_run_is_one_trace_of_gen_ai_spans(receiver, staff):
    run, _ = triage_with_a_sub_agent(staff)
    assert otel_export.run_trace_export(run_id=run.pk) == 7
    spans = receiver.spans
    named = by_name(spans)
    assert sorted((name, len(group)) for name, group in named.items()) == [
        ("chat gpt-test", 3), ("execute_tool delegate", 1), ("execute_tool read_text_file", 2),
        ("invoke_agent email_triage", 1),
    ]  # fmt: skip
    [root] = named["invoke_agent email_triage"]
    assert len({s.trace_id for s in spans}) == 1 and root.parent_id == ""
    assert all(s.parent_id == root.span_id for s in spans if s is not root)
    assert {s.name: s.kind for s in spans} == {
        "invoke_agent email_triage": "INTERNAL", "chat gpt-test": "CLIENT", "execute_tool read_text_file": "INTERNAL",
        "execute_tool delegate": "INTERNAL",
    }  # fmt: skip
    assert root.resource["service.name"] == "agent-feedback" and root.scope == "agent_feedback.runs"

    strategies = list(AppliedStrategy.objects.filter(run=run).order_by("pk"))
    expected = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-test",
        "gen_ai.agent.name": "email_triage",
        "gen_ai.conversation.id": str(run.pk),
        "session.id": f"task-{run.task_id}",
        "user.id": str(staff.pk),
        "agent_feedback.run.id": run.pk,
        "agent_feedback.run.status": "succeeded",
        "agent_feedback.run.outcome": run.outcome,
        "agent_feedback.run.score": run.score,
        "agent_feedback.run.input_tokens": 620,
        "agent_feedback.strategy.ids": [s.strategy_version.strategy_id for s in strategies],
        "agent_feedback.strategy.versions": [1, 1],
        "agent_feedback.strategy.arms": ["active", "treatment"],
        "agent_feedback.trial.strategy_id": strategies[1].strategy_version.strategy_id,
        "agent_feedback.trial.arm": "treatment",
    }
    assert root.attributes.items() >= expected.items()
    assert "error.type" not in root.attributes and root.status == "UNSET"
    scored = {(e.evaluator, e.score) for e in Evaluation.objects.filter(run=run)}
    events = [attrs for name, attrs, _ in root.events if name == "gen_ai.evaluation.result"]
    assert {(a["gen_ai.evaluation.name"], a.get("gen_ai.evaluation.score.value")) for a in events} == scored
    assert [name for name, _, _ in root.events].count("agent_feedback.reflection") == 1  # after the failed read

    # One chat span per model call, each with its own tokens; together, the run's.
    chats = sorted(named["chat gpt-test"], key=lambda s: s.attributes["agent_feedback.turn"])
    usage = [(s.attributes["gen_ai.usage.input_tokens"], s.attributes["gen_ai.usage.output_tokens"]) for s in chats]
    assert usage == [(120, 30), (200, 15), (300, 40)]
    assert all(s.attributes["gen_ai.operation.name"] == "chat" for s in chats)
    assert chats[0].attributes["openinference.span.kind"] == "LLM"

    tools = {s.attributes["gen_ai.tool.call.id"]: s for s in spans if s.name.startswith("execute_tool")}
    assert {k: s.attributes["gen_ai.tool.name"] for k, s in tools.items()} == {
        "call-1": "read_text_file", "call-2": "read_text_file", "call-3": "delegate",
    }  # fmt: skip
    missing = run.steps.get(tool_call_id="call-2")
    assert (tools["call-2"].attributes["error.type"], tools["call-2"].status) == (missing.error_class, "ERROR")
    assert missing.error_class and tools["call-2"].status_message == missing.error_class  # the class, not the text
    assert "error.type" not in tools["call-1"].attributes and tools["call-1"].status == "UNSET"

    # Times: tools as recorded; a model call between the moments around it; the run around all.
    read = run.steps.get(tool_call_id="call-1")
    assert tools["call-1"].start == otel_export._nanos(read.started_at)
    assert chats[0].end <= min(tools["call-1"].start, tools["call-2"].start)
    assert chats[1].start >= max(tools["call-1"].end, tools["call-2"].end) and chats[1].end <= tools["call-3"].start
    assert all(root.start <= s.start <= s.end <= root.end for s in spans)


class Unreachable(Model):
    def complete(self, messages, tools):
        raise LLMError("AuthenticationError (401): bad key")


def test_a_failed_run_and_model_call_say_why_in_error_type(receiver):
    run = make_run()
    execute_run(run.pk, model=Unreachable([]))
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED
    otel_export.run_trace_export(run_id=run.pk)
    named = by_name(receiver.spans)
    [root], [chat] = named["invoke_agent arithmetic"], named["chat gpt-test"]
    assert (root.attributes["error.type"], root.status, root.status_message) == (
        "model_unreachable", "ERROR", "model_unreachable",
    )  # fmt: skip
    assert (chat.attributes["error.type"], chat.status) == ("LLMError", "ERROR")
    [(name, attempt, at)] = chat.events
    assert (name, attempt["error.type"], attempt["agent_feedback.attempt.retryable"]) == (
        "agent_feedback.attempt", "LLMError", False,
    )  # fmt: skip
    assert at == otel_export._nanos(run.steps.get().attempt_rows.get().started_at)
    assert "exception.message" not in attempt  # content: only with OTEL_CAPTURE_CONTENT


def test_a_sub_agent_s_run_nests_under_the_delegate_call(receiver):
    run, child = triage_with_a_sub_agent()
    otel_export.run_trace_export(run_id=run.pk)
    otel_export.run_trace_export(run_id=child.pk)
    named = by_name(receiver.spans)
    [delegate] = named["execute_tool delegate"]
    [parent_root] = named["invoke_agent email_triage"]
    [child_root] = named["invoke_agent arithmetic"]
    assert (child_root.trace_id, child_root.parent_id) == (delegate.trace_id, delegate.span_id)
    child_spans = [s for s in receiver.spans if s.attributes.get("gen_ai.conversation.id") == str(child.pk)]
    assert {s.name for s in child_spans} == {
        "invoke_agent arithmetic", "chat offline-demo", "execute_tool update_plan", "execute_tool calculator",
    }  # fmt: skip
    assert child_root.kind == "INTERNAL" and by_name(child_spans)["chat offline-demo"][0].kind == "INTERNAL"
    assert all(s.trace_id == parent_root.trace_id for s in child_spans)
    assert all(s.parent_id == child_root.span_id for s in child_spans if s is not child_root)
    # Trace-level attributes come from the top run alone.
    assert "session.id" not in child_root.attributes
    assert child_root.attributes["agent_feedback.run.parent_id"] == run.pk

    # Exported before its parent recorded the delegate call: later, under that call.
    Run.objects.filter(pk=child.pk).update(parent_step=None)
    Run.objects.filter(pk=run.pk).update(status=Run.Status.RUNNING)
    with pytest.raises(otel_export.ExportNotReady):
        otel_export.run_trace_export(run_id=child.pk)
    # A parent that ended without recording it: under the parent's own span.
    Run.objects.filter(pk=run.pk).update(status=Run.Status.FAILED)
    [orphan] = [s for s in otel_export.run_spans(Run.objects.get(pk=child.pk)) if s.name == "invoke_agent arithmetic"]
    assert f"{orphan.parent.span_id:016x}" == parent_root.span_id


def test_no_content_is_sent_unless_enabled(receiver):
    run, child = triage_with_a_sub_agent()
    for exported in (run, child):
        otel_export.run_trace_export(run_id=exported.pk)
    sent = b"".join(r.body for r in receiver.requests)
    assert SENDER.encode() not in sent and email_pseudonym(SENDER).encode() not in sent
    assert run.task.text.encode() not in sent and b"Reading both emails" not in sent
    for span in receiver.spans:
        assert not CONTENT & span.attributes.keys(), span.name
        assert not any(CONTENT & attrs.keys() for _, attrs, _ in span.events), span.name


def test_captured_content_is_the_stored_masked_values(receiver, settings):
    settings.OTEL_CAPTURE_CONTENT = True
    run, _ = triage_with_a_sub_agent()
    otel_export.run_trace_export(run_id=run.pk)
    sent = b"".join(r.body for r in receiver.requests)
    assert SENDER.encode() not in sent and API_KEY.encode() not in sent
    tools = {s.attributes["gen_ai.tool.call.id"]: s for s in receiver.spans if s.name.startswith("execute_tool")}
    result = tools["call-1"].attributes["gen_ai.tool.call.result"]
    assert f"From: {email_pseudonym(SENDER)}" in result  # the stored value
    assert result == otel_export._json(run.steps.get(tool_call_id="call-1").result)
    assert tools["call-1"].attributes["gen_ai.tool.call.arguments"] == '{"path": "inbox/001-invoice-twice.txt"}'
    assert "gen_ai.tool.call.result" not in tools["call-2"].attributes  # a failed call has no result
    assert tools["call-2"].status_message == run.steps.get(tool_call_id="call-2").error
    [root] = by_name(receiver.spans)["invoke_agent email_triage"]
    assert root.attributes["input.value"] == run.task.text
    assert root.attributes["output.value"] == run.final_output
    assert email_pseudonym(SENDER) in run.final_output and "[secret]" in run.final_output
    chats = sorted(by_name(receiver.spans)["chat gpt-test"], key=lambda s: s.attributes["agent_feedback.turn"])
    assert chats[0].attributes["output.value"] == "Reading both emails."
    assert '"name": "read_text_file"' in chats[0].attributes["gen_ai.output.messages"]

    # With masking off, what is stored may be raw: nothing is captured then.
    settings.PRIVACY_MASKING = False
    for span in otel_export.run_spans(run):
        assert not CONTENT & set(span.attributes), span.name


def test_exporting_again_sends_the_same_ids(receiver):
    run, _ = triage_with_a_sub_agent()
    otel_export.run_trace_export(run_id=run.pk)
    first = receiver.spans
    # A retry (or a redelivered task) sends the same spans: the same ids, the same content.
    otel_export.run_trace_export(run_id=run.pk)
    again = receiver.spans[len(first) :]
    assert {(s.trace_id, s.span_id, s.parent_id, s.name) for s in again} == {
        (s.trace_id, s.span_id, s.parent_id, s.name) for s in first
    }
    assert sorted(again, key=lambda s: s.span_id) == sorted(first, key=lambda s: s.span_id)


class LosesItsWorker(Model):
    """Answers the second call after another worker has taken the run (as the reaper hands a
    silent run on): the answer is never recorded, this worker stops."""

    def complete(self, messages, tools):
        if not self.replies[1:]:
            Run.objects.filter(status=Run.Status.RUNNING).update(worker="another-worker")
        return super().complete(messages, tools)


def test_a_run_resumed_by_another_worker_is_exported_once_whole(
    receiver, settings, sent_tasks, django_capture_on_commit_callbacks
):
    settings.OTEL_EXPORT_RUNS = True
    run = make_run(text="What is 2 + 2?")
    first = LosesItsWorker([
        LLMReply(content="Computing.", tokens_in=50, tokens_out=5,
                 tool_calls=[ToolCall("call-1", "calculator", '{"expression": "2 + 2"}')]),
        LLMReply(content="Never recorded: the lease was lost.", tokens_in=60, tokens_out=6),
    ])  # fmt: skip
    with django_capture_on_commit_callbacks(execute=True):
        execute_run(run.pk, model=first)
        assert Run.objects.get(pk=run.pk).status == Run.Status.RUNNING and not sent_tasks
        Run.objects.filter(pk=run.pk).update(status=Run.Status.QUEUED, worker="")  # the reaper
        execute_run(run.pk, model=Model([LLMReply(content="2 + 2 = 4", tokens_in=70, tokens_out=7)]))
        evaluate_run(run.pk)
    assert [name for name, _, _ in sent_tasks].count(queue.RUN_EXPORT) == 1
    otel_export.run_trace_export(run_id=run.pk)
    spans = receiver.spans
    assert sorted(s.name for s in spans) == [
        "chat gpt-test", "chat gpt-test", "execute_tool calculator", "invoke_agent arithmetic",
    ]  # fmt: skip
    assert len({s.span_id for s in spans}) == 4
    chats = sorted((s for s in spans if s.name.startswith("chat")), key=lambda s: s.attributes["agent_feedback.turn"])
    assert [c.attributes["gen_ai.usage.input_tokens"] for c in chats] == [50, 70]
    assert sum(c.attributes["gen_ai.usage.input_tokens"] for c in chats) == Run.objects.get(pk=run.pk).tokens_in


def test_export_is_off_by_default(receiver, sent_tasks, django_capture_on_commit_callbacks):
    from django.conf import settings

    assert settings.OTEL_EXPORT_RUNS is False
    run = make_run()
    with django_capture_on_commit_callbacks(execute=True):
        execute_run(run.pk)
        evaluate_run(run.pk)
    assert Evaluation.objects.filter(run=run).exists()
    assert queue.RUN_EVALUATE in [name for name, _, _ in sent_tasks]
    assert queue.RUN_EXPORT not in [name for name, _, _ in sent_tasks]
    assert receiver.requests == []


def test_a_receiver_that_is_down_fails_neither_the_run_nor_its_evaluation(
    settings, monkeypatch, caplog, sent_tasks, django_capture_on_commit_callbacks
):
    settings.OTEL_EXPORT_RUNS = True
    settings.OTEL_EXPORT_RETRIES = 2
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{free_port()}")  # nothing listens
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    run = make_run()
    with django_capture_on_commit_callbacks(execute=True):
        execute_run(run.pk)
        evaluate_run(run.pk)
    assert (queue.RUN_EXPORT, (run.pk,), {}) in sent_tasks  # queued once the evaluation committed
    with caplog.at_level(logging.WARNING):
        result = run_export_task.apply(args=(run.pk,))
    assert result.successful()  # given up on quietly: never anyone else's failure
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED and run.score is not None
    assert Evaluation.objects.filter(run=run, status="ok").exists()
    ours = [r.getMessage() for r in caplog.records if r.name == "feedback.tasks"]
    assert ours[:2] == [
        f"run {run.pk} not exported (attempt {n}): the OTLP endpoint did not take the spans of run {run.pk}; "
        "trying again"
        for n in (1, 2)
    ]
    assert ours[2:] == [
        f"run {run.pk} was not exported after 3 attempts: the OTLP endpoint did not take the spans of run {run.pk}"
    ]


def test_a_refusing_receiver_is_tried_a_bounded_number_of_times(receiver, settings):
    settings.OTEL_EXPORT_RETRIES = 2
    receiver.answer = 500
    run = make_run()
    execute_run(run.pk)
    evaluate_run(run.pk)
    assert run_export_task.apply(args=(run.pk,)).successful()
    assert len(receiver.requests) == 3  # the first try and two more, each the whole run
    assert all(len(r.spans) == len(receiver.requests[0].spans) > 0 for r in receiver.requests)
    assert Step.objects.filter(run=run).exists()
