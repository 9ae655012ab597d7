import json

import pytest

from feedback.agent.llm import LLMReply, ToolCall
from feedback.agent.loop import AgentLoop, conversation, execute_run
from feedback.models import Run, Step, Task

from .factories import make_run

pytestmark = pytest.mark.django_db


def _kinds(run):
    return list(run.steps.values_list("kind", "tool_name"))


def test_offline_model_triages_the_demo_inbox(demo_workspace):
    run = make_run(
        text="Classify the emails in inbox/ and flag the urgent ones",
        kind=Task.Kind.EMAIL_TRIAGE,
        workspace=demo_workspace,
    )
    execute_run(run.pk)
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED
    assert run.llm_backend == "offline"
    assert "Triaged 6 email(s)" in run.final_output
    assert "002-site-down.txt: technical — URGENT" in run.final_output
    reads = run.steps.filter(tool_name="read_text_file")
    assert reads.count() == 6
    # The six reads came from one model reply: one turn, run concurrently.
    assert reads.values("turn").distinct().count() == 1
    indices = list(run.steps.values_list("index", flat=True))
    assert indices == list(range(len(indices))) == list(range(run.step_count))


def test_offline_model_analyses_a_file(demo_workspace):
    run = make_run(
        text="Summarise report.txt and count its words",
        kind=Task.Kind.FILE_ANALYSIS,
        workspace=demo_workspace,
    )
    execute_run(run.pk)
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED
    assert "80 words" in run.final_output
    assert [t for _, t in _kinds(run) if t] == ["read_text_file", "analyze_text"]


def test_offline_model_does_arithmetic(db):
    run = make_run(text="What is (17 * 23 + 4) / 5?")
    execute_run(run.pk)
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED
    assert run.final_output.endswith("= 79")
    call = run.steps.get(kind=Step.Kind.TOOL_CALL)
    assert call.arguments == {"expression": "(17 * 23 + 4) / 5"}
    assert call.result == {"expression": "(17 * 23 + 4) / 5", "value": 79}
    assert call.attempt_rows.count() == 1


def test_a_missing_file_is_an_observation_not_a_crash(demo_workspace):
    run = make_run(text="Summarise release-notes.txt", kind=Task.Kind.FILE_ANALYSIS, workspace=demo_workspace)
    execute_run(run.pk)
    run.refresh_from_db()
    failed = run.steps.get(tool_name="read_text_file")
    assert failed.success is False
    assert "No such file" in failed.error
    assert failed.error_signature and len(failed.error_signature) == 40
    assert run.status == Run.Status.SUCCEEDED  # the model answered; evaluation judges the answer


def test_only_a_queued_run_is_claimed(db):
    run = make_run(status=Run.Status.RUNNING)
    execute_run(run.pk)
    run.refresh_from_db()
    assert run.status == Run.Status.RUNNING
    assert run.step_count == 0


def test_a_cancelled_run_stops_before_its_next_step(db):
    run = make_run(cancel_requested=True)
    execute_run(run.pk)
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLED
    assert run.step_count == 0


class ScriptedModel:
    """A stand-in for the LLM (not our code): replies from a list, records what it saw."""

    backend = "scripted"
    name = "scripted"

    def __init__(self, replies):
        self.replies = list(replies)
        self.seen = []

    def complete(self, messages, tools):
        self.seen.append(messages)
        return self.replies.pop(0)


def test_bad_tool_calls_become_observations_the_model_reads(db):
    model = ScriptedModel(
        [
            LLMReply(tool_calls=[ToolCall("c1", "calculator", '{"expression": ')]),
            LLMReply(tool_calls=[ToolCall("c2", "format_disk", "{}")]),
            LLMReply(tool_calls=[ToolCall("c3", "calculator", '{"expr": "1+1"}')]),
            LLMReply(content=""),
            LLMReply(content="Done."),
        ]
    )
    run = make_run(status=Run.Status.RUNNING)
    AgentLoop(run, model=model).execute()
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED
    steps = list(run.steps.all())
    assert [s.kind for s in steps] == ["tool_call", "tool_call", "tool_call", "model_error", "final"]
    assert "not valid JSON" in steps[0].error and steps[0].arguments == '{"expression": '
    assert "Unknown tool 'format_disk'" in steps[1].error
    assert "Additional properties" in steps[2].error or "expression" in steps[2].error
    last_seen = model.seen[-1]
    tool_messages = [m for m in last_seen if m["role"] == "tool"]
    assert [json.loads(m["content"])["ok"] for m in tool_messages] == [False, False, False]
    assert last_seen[-1] == {"role": "user", "content": steps[3].thought}


def test_step_limit_ends_the_run(db, settings):
    settings.AGENT_MAX_STEPS = 3
    model = ScriptedModel(
        [LLMReply(tool_calls=[ToolCall(f"c{i}", "calculator", '{"expression": "1+1"}')]) for i in range(10)]
    )
    run = make_run(status=Run.Status.RUNNING)
    AgentLoop(run, model=model).execute()
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED
    assert "Step limit reached (3 steps)" in run.error
    assert run.step_count == 3


def test_conversation_is_rebuilt_from_steps_for_resume(demo_workspace):
    run = make_run(text="Summarise report.txt", kind=Task.Kind.FILE_ANALYSIS, workspace=demo_workspace)
    execute_run(run.pk)
    run.refresh_from_db()
    messages = conversation(run)
    assert [m["role"] for m in messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    assert messages[0]["content"] == run.system_prompt
    assert messages[2]["tool_calls"][0]["function"]["name"] == "read_text_file"
    assert messages[-1]["content"] == run.final_output
