import json

import pytest

from feedback import services
from feedback.agent.conversation import conversation
from feedback.agent.llm import LLMReply, ToolCall
from feedback.agent.loop import AgentLoop, execute_run
from feedback.agent.sandbox import sandbox_path
from feedback.agent.tools import Tool
from feedback.models import Run, Step, Task, ToolConfirmation
from feedback.privacy import email_pseudonym

from .factories import make_run

pytestmark = pytest.mark.django_db


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


def run_loop(run, model, tools=None):
    """Drive a run with a scripted model, as execute_run would after claiming it."""
    lease = "test-lease"
    Run.objects.filter(pk=run.pk).update(status=Run.Status.RUNNING, worker=lease)
    run.refresh_from_db()
    try:
        AgentLoop(run, lease=lease, model=model, tools=tools).execute()
    except Exception as exc:  # Paused is the loop telling its worker to let go
        if type(exc).__name__ != "Paused":
            raise
    run.refresh_from_db()
    return run


def call(name, **arguments):
    return ToolCall(f"c-{name}-{len(json.dumps(arguments))}", name, json.dumps(arguments))


def tools_called(run):
    return [s.tool_name for s in run.steps.filter(kind=Step.Kind.TOOL_CALL)]


def test_a_missing_file_leads_to_reflection_and_a_new_plan(demo_workspace):
    run = make_run(text="Summarise release-notes.txt", kind=Task.Kind.FILE_ANALYSIS, workspace=demo_workspace)
    execute_run(run.pk)
    run.refresh_from_db()
    failed = run.steps.get(tool_name="read_text_file")
    assert failed.success is False and "No such file" in failed.error
    assert len(failed.error_signature) == 40
    reflection = run.steps.get(kind=Step.Kind.REFLECTION)
    assert reflection.index == failed.index + 1
    assert "Use a path the error names" in reflection.thought
    assert "update_plan" not in reflection.thought  # the loop marks the plan's step failed itself
    plans = run.steps.filter(tool_name="update_plan").order_by("index")
    assert plans.count() == 2
    assert plans[1].arguments["steps"][0]["status"] == "failed"
    assert run.status == Run.Status.SUCCEEDED  # it answered; the evaluators judge the answer


def test_the_plan_step_in_progress_fails_with_its_step_and_stays_failed(db):
    plan = [{"title": "Read the notes", "status": "in_progress"}, {"title": "Answer", "status": "pending"}]
    model = ScriptedModel(
        [
            LLMReply(tool_calls=[call("update_plan", steps=plan)]),
            LLMReply(tool_calls=[ToolCall("r1", "read_text_file", '{"path": "missing.txt"}')]),
            LLMReply(content="The notes are missing."),
        ]
    )
    run = run_loop(make_run(kind=Task.Kind.FILE_ANALYSIS), model)
    assert run.status == Run.Status.SUCCEEDED
    assert [item["status"] for item in run.plan] == ["failed", "completed"]  # the answer concluded the rest


def test_a_resumed_run_completes_the_plan_its_first_worker_recorded(db):
    run = make_run(plan=[{"title": "Compute", "status": "in_progress"}])
    run = run_loop(run, ScriptedModel([LLMReply(content="4")]))
    assert run.status == Run.Status.SUCCEEDED
    assert run.plan == [{"title": "Compute", "status": "completed"}]


def test_only_a_queued_run_is_claimed(db):
    run = make_run(status=Run.Status.RUNNING, worker="someone-else")
    execute_run(run.pk)
    run.refresh_from_db()
    assert run.status == Run.Status.RUNNING and run.worker == "someone-else"
    assert run.step_count == 0


def test_a_cancelled_queued_run_never_starts(db):
    run = make_run(cancel_requested=True)
    execute_run(run.pk)
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLED
    assert run.step_count == 0


def test_cancel_stops_a_running_run_at_its_next_step(db):
    run = make_run()

    class CancelsItself(ScriptedModel):
        def complete(self, messages, tools):
            Run.objects.filter(pk=run.pk).update(cancel_requested=True)
            return super().complete(messages, tools)

    run = run_loop(run, CancelsItself([LLMReply(tool_calls=[call("calculator", expression="1+1")])] * 3))
    assert run.status == Run.Status.CANCELLED
    assert run.step_count == 2  # the one turn: its model call and its tool call


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
    run = run_loop(make_run(), model)
    assert run.status == Run.Status.SUCCEEDED
    kinds = list(run.steps.values_list("kind", flat=True))
    # Every turn begins with its model call's step: a thought (it called tools), an error, the answer.
    assert kinds == ["thought", "tool_call", "reflection"] * 3 + ["model_error", "final"]
    calls = list(run.steps.filter(kind="tool_call"))
    assert "not valid JSON" in calls[0].error and calls[0].arguments == '{"expression": '
    assert "Unknown tool 'format_disk'" in calls[1].error
    assert "'expression' is a required property" in calls[2].error
    last_seen = model.seen[-1]
    tool_messages = [m for m in last_seen if m["role"] == "tool"]
    assert [json.loads(m["content"])["ok"] for m in tool_messages] == [False, False, False]
    assert last_seen[-1]["role"] == "user" and "empty" in last_seen[-1]["content"]
    assert "Use only the tools listed" in run.steps.filter(kind="reflection")[1].thought


def test_the_same_failure_again_and_again_ends_the_run(db, settings):
    settings.AGENT_MAX_IDENTICAL_FAILURES = 3
    same = LLMReply(tool_calls=[ToolCall("x", "read_text_file", '{"path": "missing.txt"}')])
    run = run_loop(make_run(kind=Task.Kind.FILE_ANALYSIS), ScriptedModel([same] * 10))
    assert run.status == Run.Status.FAILED
    assert run.error.startswith("Stopped: the same call failed the same way 3 times")
    reflections = list(run.steps.filter(kind="reflection").values_list("thought", flat=True))
    assert len(reflections) == 3
    assert "has now failed 2 times" in reflections[1]


def test_a_call_repeating_an_earlier_success_is_reflected_on_and_fails_no_plan_step(demo_workspace):
    plan = [{"title": "Read the notes", "status": "in_progress"}, {"title": "Answer", "status": "pending"}]
    read = '{"path": "docs/release-notes.txt"}'
    model = ScriptedModel(
        [
            LLMReply(tool_calls=[call("update_plan", steps=plan), ToolCall("r1", "read_text_file", read)]),
            LLMReply(tool_calls=[call("update_plan", steps=plan)]),  # the plan again: no loop
            LLMReply(tool_calls=[ToolCall("r2", "read_text_file", read)]),
            LLMReply(tool_calls=[ToolCall("r3", "read_text_file", '{"path": "docs/meeting-notes.md"}')]),
            LLMReply(content="The release notes announce version 2.0."),
        ]
    )
    run = run_loop(make_run(kind=Task.Kind.FILE_ANALYSIS, workspace=demo_workspace), model)
    reflection = run.steps.get(kind=Step.Kind.REFLECTION)  # one: after the repeat, not after the other file
    assert reflection.turn == 3 and reflection.thought == (
        "Reflection on the last step:\n- read_text_file(path='docs/release-notes.txt') repeats an earlier call, "
        "whose result you have: use it, or call a tool with other arguments."
    )
    assert reflection.thought in [m["content"] for m in model.seen[3]]  # the model read it next turn
    assert (run.status, [item["status"] for item in run.plan]) == (Run.Status.SUCCEEDED, ["completed", "completed"])


def test_a_tool_that_acts_may_be_called_again_without_a_reflection(db):
    # Not idempotent: another call is another action (a ping, a reply), not a result already had.
    ping = Tool(
        name="ping", description="Ping.", parameters={"type": "object"}, func=lambda ctx: {"ok": 1}, idempotent=False
    )
    again = LLMReply(tool_calls=[ToolCall("p", "ping", "{}")])
    run = run_loop(make_run(), ScriptedModel([again, again, again, LLMReply(content="Pinged thrice.")]), {"ping": ping})
    assert tools_called(run) == ["ping"] * 3 and not run.steps.filter(kind=Step.Kind.REFLECTION).exists()
    assert run.final_output == "Pinged thrice."


def test_step_limit_ends_the_run(db, settings):
    settings.AGENT_MAX_STEPS = 3
    replies = [LLMReply(tool_calls=[call("calculator", expression=f"{i}+1")]) for i in range(10)]
    run = run_loop(make_run(), ScriptedModel(replies))
    assert run.status == Run.Status.FAILED
    assert "Step limit reached (3 steps)" in run.error
    # Checked before each model call: two turns of a model call and a tool call ran.
    assert run.step_count == 4


def test_conversation_is_rebuilt_from_steps(demo_workspace):
    run = make_run(text="Summarise report.txt", kind=Task.Kind.FILE_ANALYSIS, workspace=demo_workspace)
    execute_run(run.pk)
    run.refresh_from_db()
    messages = conversation(run)
    roles = [m["role"] for m in messages]
    assert roles == ["system", "user", "assistant", "tool", "tool", "assistant", "tool", "assistant"]
    assert messages[0]["content"] == run.system_prompt
    assert [c["function"]["name"] for c in messages[2]["tool_calls"]] == ["update_plan", "read_text_file"]
    assert messages[-1]["content"] == run.final_output


def _parsed(messages):
    """Messages with their JSON texts parsed: stored jsonb keeps its keys in its own order."""

    def value(v):
        if isinstance(v, str):
            try:
                return json.loads(v)
            except ValueError:
                return v
        if isinstance(v, dict):
            return {k: value(x) for k, x in v.items()}
        if isinstance(v, list):
            return [value(x) for x in v]
        return v

    return value(messages)


def test_each_turn_the_model_sees_what_a_resumed_run_would_rebuild(db):
    run = make_run(text="What is 2 + 3, and 4 * 5?")

    class ComparesWithTheStoredSteps(ScriptedModel):
        def complete(self, messages, tools):
            stored = Run.objects.select_related("task").get(pk=run.pk)
            self.rebuilt = [*getattr(self, "rebuilt", []), conversation(stored)]
            return super().complete(messages, tools)

    model = ComparesWithTheStoredSteps(
        [
            LLMReply(content="Two sums at once.", tool_calls=[call("calculator", expression="2+3"),
                                                               call("calculator", expression="4*5")]),
            LLMReply(tool_calls=[ToolCall("bad", "calculator", '{"expression": ')]),
            LLMReply(content=""),
            LLMReply(tool_calls=[call("calculator", expression="5+20")]),
            LLMReply(content="5 and 20, 25 in all."),
        ]
    )  # fmt: skip
    run = run_loop(run, model)
    assert run.status == Run.Status.SUCCEEDED
    assert len(model.seen) == len(model.rebuilt) == 5
    for seen, rebuilt in zip(model.seen, model.rebuilt, strict=True):
        assert _parsed(seen) == _parsed(rebuilt)
    roles = [m["role"] for m in model.seen[-1]]
    assert roles == ["system", "user", "assistant", "tool", "tool", "assistant", "tool", "user", "user",
                     "assistant", "tool"]  # fmt: skip
    assert [len(m) for m in model.seen] == [2, 5, 8, 9, 11]  # each call got its own list


def test_a_sensitive_call_waits_and_approval_resumes_it(demo_workspace, reviewer, django_capture_on_commit_callbacks):
    reply = LLMReply(
        content="Replying to the customer.",
        tool_calls=[call("send_reply", to="ops@northwind.example", subject="Refund", body="On its way.")],
    )
    run = run_loop(make_run(kind=Task.Kind.EMAIL_TRIAGE, workspace=demo_workspace), ScriptedModel([reply]))
    assert run.status == Run.Status.AWAITING_CONFIRMATION and run.worker == ""
    confirmation = ToolConfirmation.objects.get(run=run)
    # Stored masked (privacy); the address is resolved from the run's own files when it runs.
    assert confirmation.arguments["to"] == email_pseudonym("ops@northwind.example")
    assert not run.steps.filter(tool_name="send_reply").exists()

    with django_capture_on_commit_callbacks() as queued:
        services.confirmation_decide(confirmation=confirmation, user=reviewer, approve=True)
    run.refresh_from_db()
    assert run.status == Run.Status.QUEUED and len(queued) == 1
    with pytest.raises(services.AlreadyDecided):
        services.confirmation_decide(confirmation=confirmation, user=reviewer, approve=False)

    model = ScriptedModel([LLMReply(content="Sent.")])
    run = run_loop(run, model)
    sent = run.steps.get(tool_name="send_reply")
    assert sent.success and sent.result["saved_as"] == "outbox/001-reply.txt"
    outbox = sandbox_path(run) / "outbox" / "001-reply.txt"
    assert outbox.read_text().startswith("To: ops@northwind.example\n")
    assert run.status == Run.Status.SUCCEEDED
    tool_message = next(m for m in model.seen[0] if m["role"] == "tool")
    assert json.loads(tool_message["content"])["ok"] is True


def test_a_refused_call_becomes_an_observation(db, reviewer):
    reply = LLMReply(tool_calls=[call("send_reply", to="a@example.com", subject="s", body="b")])
    run = run_loop(make_run(), ScriptedModel([reply]))
    confirmation = ToolConfirmation.objects.get(run=run)
    services.confirmation_decide(confirmation=confirmation, user=reviewer, approve=False, reason="Wrong customer")
    model = ScriptedModel([LLMReply(content="I did not send it.")])
    run = run_loop(run, model)
    refused = run.steps.get(tool_name="send_reply")
    assert refused.success is False and refused.error_class == "Refused"
    assert refused.error == "reviewer refused this call: Wrong customer"
    assert "reviewer refused this call: Wrong customer" in json.dumps(model.seen[0])
    assert run.status == Run.Status.SUCCEEDED


def test_only_reviewers_confirm(db, operator):
    run = run_loop(make_run(), ScriptedModel([LLMReply(tool_calls=[call("send_reply", to="a@b.co", subject="s",
                                                                               body="b")])]))  # fmt: skip
    with pytest.raises(services.PermissionDenied):
        services.confirmation_decide(confirmation=run.confirmations.get(), user=operator, approve=True)


def test_a_sub_agent_runs_as_a_nested_child(demo_workspace):
    parent_model = ScriptedModel(
        [
            LLMReply(tool_calls=[call("delegate", task="What is 6 * 7?", kind="arithmetic")]),
            LLMReply(content="The sub-agent says 42."),
        ]
    )
    run = run_loop(make_run(text="Ask a helper for 6 * 7", workspace=demo_workspace), parent_model)
    child = run.children.get()
    assert child.status == Run.Status.SUCCEEDED and child.final_output == "6 * 7 = 42"
    step = run.steps.get(tool_name="delegate")
    assert step.result == {"run_id": child.pk, "status": "succeeded", "answer": "6 * 7 = 42"}
    assert child.parent_step == step
    assert run.status == Run.Status.SUCCEEDED


def test_a_run_that_may_not_delegate_is_not_offered_delegate(demo_workspace, settings):
    settings.SUBAGENT_MAX_DEPTH = 1
    parent = run_loop(make_run(text="Ask a helper for 6 * 7", workspace=demo_workspace),
                      ScriptedModel([LLMReply(tool_calls=[call("delegate", task="What is 6 * 7?", kind="arithmetic")]),
                                     LLMReply(content="42.")]))  # fmt: skip
    assert "delegate" in parent.tools_offered
    child = parent.children.get()
    assert "delegate" not in child.tools_offered and "calculator" in child.tools_offered  # at the depth limit
    settings.SUBAGENT_MAX_DEPTH = 0  # sub-agents off
    alone = run_loop(make_run(text="What is 2 + 2?"), ScriptedModel([LLMReply(content="4")]))
    assert "delegate" not in alone.tools_offered and "update_plan" in alone.tools_offered


def test_tool_retrieval_offers_the_relevant_tools(db, settings):
    settings.TOOL_RETRIEVAL_THRESHOLD = 3
    settings.TOOL_RETRIEVAL_LIMIT = 2
    run = run_loop(make_run(text="Compute the arithmetic expression 2 + 2"), ScriptedModel([LLMReply(content="4")]))
    assert run.tool_selection == "lexical"
    assert "calculator" in run.tools_offered
    assert {"update_plan", "delegate"} <= set(run.tools_offered)  # the engine's own tools always go
    assert len(run.tools_offered) == 2 + 2


def test_a_failed_run_leaves_unreached_plan_items_pending_and_fails_the_one_in_progress(db, settings):
    settings.AGENT_MAX_STEPS = 3
    plan = [{"title": "Read", "status": "completed"}, {"title": "Count", "status": "in_progress"},
            {"title": "Answer", "status": "pending"}]  # fmt: skip
    model = ScriptedModel(
        [LLMReply(tool_calls=[call("update_plan", steps=plan)])]
        + [LLMReply(tool_calls=[ToolCall(f"c{i}", "calculator", '{"expression": "1 + 1"}')]) for i in range(5)]
    )
    run = run_loop(make_run(), model)
    assert run.status == Run.Status.FAILED and "Step limit" in run.error
    assert [item["status"] for item in run.plan] == ["completed", "failed", "pending"]
