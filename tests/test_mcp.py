"""Tools from MCP servers, end to end: a real MCP server process (tests/mcp_server.py, the SDK's
MCPServer) over stdio and over streamable HTTP, called by the agent loop through the invoker."""

import asyncio
import json
import threading

import pytest
from django.urls import reverse

from feedback import services
from feedback.agent import invoker
from feedback.agent.breaker import CircuitBreaker
from feedback.agent.llm import LLMReply, ToolCall
from feedback.agent.sandbox import sandbox_path
from feedback.agent.tools import BUILTIN_TOOLS, ToolContext, enabled_tools
from feedback.agent.tools.mcp import release_run
from feedback.models import McpServer, McpToolOverride, Run, Step, Task, ToolConfirmation

from .conftest import make_user, mcp_server_processes, register_mcp_server
from .factories import make_run
from .fake_openai import FakeOpenAI, completion
from .fake_openai import call as openai_call
from .test_agent_loop import ScriptedModel, run_loop

pytestmark = pytest.mark.django_db


def tool_call(name: str, /, **arguments) -> ToolCall:
    return ToolCall(f"c-{name}-{len(json.dumps(arguments))}", name, json.dumps(arguments))


def calls_then_answer(*calls: ToolCall, answer: str = "Done.") -> ScriptedModel:
    """One reply calling ``calls`` (each turn its own), then the answer."""
    return ScriptedModel([*(LLMReply(tool_calls=[c]) for c in calls), LLMReply(content=answer)])


def mcp_steps(run: Run) -> list[Step]:
    return list(run.steps.filter(kind=Step.Kind.TOOL_CALL, tool_name__contains="__").order_by("index"))


def test_a_stdio_servers_tool_is_called_end_to_end(mcp_stdio):
    run = run_loop(make_run(text="Add 2 and 3"), calls_then_answer(tool_call("team__add", a=2, b=3), answer="5"))

    assert run.status == Run.Status.SUCCEEDED, run.error
    (step,) = mcp_steps(run)
    assert step.success, step.error
    assert (step.tool_name, step.arguments, step.result) == ("team__add", {"a": 2, "b": 3}, {"result": 5})
    assert {"team__add", "team__echo", "calculator", "read_text_file"} <= set(run.tools_offered)
    assert mcp_server_processes() == []  # the run's server process ended with the run


def test_an_http_servers_tool_is_called_end_to_end_by_a_model_over_http(mcp_http, settings):
    """The real openai SDK against a local OpenAI-compatible endpoint; the MCP server over HTTP,
    with the header the operator configured."""
    McpServer.objects.filter(pk=mcp_http.pk).update(headers={"Authorization": "Bearer team-token-7"})

    def model(body):
        done = [m for m in body["messages"] if m["role"] == "tool"]
        if len(done) == 2:
            return {"json": completion("It said: hello")}
        calls = [openai_call("remote__echo", {"text": "hello"}, id="c1"), openai_call("remote__whoami", {}, id="c2")]
        return {"json": completion(tool_calls=calls)}

    with FakeOpenAI() as endpoint:
        endpoint.responder = model
        settings.LLM_BACKEND, settings.OPENAI_BASE_URL, settings.OPENAI_API_KEY = "openai", endpoint.base_url, "k"
        run = make_run(text="Say hello through the echo tool", kind=Task.Kind.GENERAL)
        from feedback.agent.loop import execute_run

        execute_run(run.pk)
    run.refresh_from_db()

    assert run.status == Run.Status.SUCCEEDED, run.error
    assert run.final_output == "It said: hello"
    echoed, whoami = mcp_steps(run)
    assert (echoed.tool_name, echoed.success, echoed.result) == ("remote__echo", True, {"result": "hello"})
    assert (whoami.success, whoami.result) == (True, {"result": "the team's agent"})
    offered = {t["function"]["name"]: t["function"] for t in endpoint.requests[0]["tools"]}
    # The model was given the server's own JSON Schema under the prefixed name.
    assert offered["remote__echo"]["parameters"]["properties"] == {"text": {"title": "Text", "type": "string"}}
    assert offered["remote__echo"]["parameters"]["required"] == ["text"]


def test_a_server_that_crashes_mid_call_is_a_failed_step_and_the_run_goes_on(mcp_stdio):
    model = calls_then_answer(tool_call("team__crash"), tool_call("team__add", a=1, b=1), answer="2")
    run = run_loop(make_run(text="Crash, then add"), model)

    assert run.status == Run.Status.SUCCEEDED, run.error
    crashed, added = mcp_steps(run)
    assert crashed.success is False
    assert "MCP server 'team' exited or closed the connection during the call" in crashed.error
    # It may have run: a tool that is not read-only is not run again.
    assert crashed.attempts == 1
    assert added.success and added.result == {"result": 2}  # a new process for the next call
    assert mcp_server_processes() == []


def test_a_server_that_hangs_is_stopped_at_the_timeout(mcp_stdio):
    McpToolOverride.objects.create(server=mcp_stdio, tool="hang", timeout_seconds=1)
    model = calls_then_answer(tool_call("team__pid"), tool_call("team__hang"), tool_call("team__pid"), answer="ok")
    run = run_loop(make_run(text="Hang"), model)

    assert run.status == Run.Status.SUCCEEDED, run.error
    before, hung, after = mcp_steps(run)
    assert hung.success is False
    assert hung.error == "MCP server 'team' did not answer hang within 1 s."
    assert before.success and after.success
    assert before.result != after.result  # the hung server was let go: the next call started a new one
    assert mcp_server_processes() == []  # and neither is left running


def test_an_error_result_is_a_failed_step_with_the_servers_message(mcp_stdio):
    run = run_loop(make_run(text="Fail"), calls_then_answer(tool_call("team__fail", reason="no such project")))

    assert run.status == Run.Status.SUCCEEDED, run.error
    (step,) = mcp_steps(run)
    assert step.success is False and step.error_class == "ToolError" and step.attempts == 1
    assert step.error == (
        "fail on MCP server 'team' reported an error: Error executing tool fail: the tracker refused: no such project"
    )


def test_a_malformed_reply_is_a_failed_step(mcp_stdio):
    run = run_loop(make_run(text="Malformed"), calls_then_answer(tool_call("team__malformed")))

    assert run.status == Run.Status.SUCCEEDED, run.error
    (step,) = mcp_steps(run)
    assert step.success is False and step.attempts == 1
    assert step.error.startswith("MCP server 'team' sent a malformed reply (")


def test_a_server_that_is_down_is_a_failed_step_retried_as_transient(mcp_http, mcp_http_process, settings):
    settings.TOOL_BREAKER_FAILURES = 3
    mcp_http_process.stop()
    run = run_loop(make_run(text="Add"), calls_then_answer(tool_call("remote__add", a=1, b=2)))

    assert run.status == Run.Status.SUCCEEDED, run.error
    (step,) = mcp_steps(run)
    assert step.success is False
    assert step.error.startswith(f"MCP server 'remote' is unreachable at {mcp_http_process.url}")
    # Never reached, so safe to try again: every attempt is on the record, then the breaker of
    # this tool (and only this one) opens.
    assert step.attempts == 3 and step.attempt_rows.count() == 3
    assert CircuitBreaker("remote__add").is_open() and not CircuitBreaker("remote__echo").is_open()


def test_a_stdio_server_that_cannot_start_is_a_failed_step_not_retried(mcp_stdio):
    McpServer.objects.filter(pk=mcp_stdio.pk).update(command="/nonexistent/mcp-server")
    run = run_loop(make_run(text="Add"), calls_then_answer(tool_call("team__add", a=1, b=2)))

    assert run.status == Run.Status.SUCCEEDED, run.error
    (step,) = mcp_steps(run)
    assert step.success is False and step.attempts == 1
    assert step.error == (
        "MCP server 'team' could not be started ('/nonexistent/mcp-server': No such file or directory)."
    )


def test_arguments_breaking_the_servers_schema_are_refused_before_the_call(mcp_stdio):
    model = calls_then_answer(
        tool_call("team__write_note", name="note.txt"),  # no text
        tool_call("team__write_note", name="note.txt", text=42),
    )
    run = run_loop(make_run(text="Write a note"), model)

    assert run.status == Run.Status.SUCCEEDED, run.error
    missing, wrong = mcp_steps(run)
    assert (missing.error_class, wrong.error_class) == ("InvalidToolCall", "InvalidToolCall")
    assert missing.error == "Invalid arguments for team__write_note (arguments): 'text' is a required property"
    assert wrong.error == "Invalid arguments for team__write_note (text): 42 is not of type 'string'"
    assert not (sandbox_path(run) / "note.txt").exists()  # the server never ran it
    assert mcp_server_processes() == []


def test_a_sensitive_mcp_tool_waits_for_a_reviewers_confirmation(mcp_stdio, reviewer):
    McpToolOverride.objects.create(server=mcp_stdio, tool="refund_order", sensitive=True)
    refund = tool_call("team__refund_order", order_id="A-17", amount=12.5)
    run = run_loop(make_run(text="Refund order A-17"), ScriptedModel([LLMReply(tool_calls=[refund])]))

    assert run.status == Run.Status.AWAITING_CONFIRMATION
    confirmation = ToolConfirmation.objects.get(run=run)
    assert confirmation.tool_name == "team__refund_order"
    assert confirmation.arguments == {"order_id": "A-17", "amount": 12.5}
    assert mcp_steps(run) == []  # nothing ran yet
    assert mcp_server_processes() == []  # and no server waits with the run

    services.confirmation_decide(confirmation=confirmation, user=reviewer, approve=True, reason="")
    run = run_loop(run, ScriptedModel([LLMReply(content="Refunded.")]))

    assert run.status == Run.Status.SUCCEEDED, run.error
    (step,) = mcp_steps(run)
    assert step.success and step.result == {"result": "refunded 12.50 on order A-17"}


def test_a_stdio_server_works_in_the_runs_sandbox(mcp_stdio):
    model = calls_then_answer(tool_call("team__write_note", name="note.txt", text="hello"))
    run = run_loop(make_run(text="Write a note"), model)

    (step,) = mcp_steps(run)
    note = sandbox_path(run) / "note.txt"
    assert step.success and note.read_text() == "hello"
    assert step.result == {"result": f"wrote 5 characters to {note.resolve()}"}


def test_results_from_mcp_servers_are_stored_masked(mcp_stdio):
    model = calls_then_answer(tool_call("team__lookup_customer", email="ada@example.com"))
    run = run_loop(make_run(text="Look up the customer"), model)

    (step,) = mcp_steps(run)
    stored = json.dumps([step.arguments, step.result])
    assert step.success and step.result["name"] == "Ada Lovelace"
    assert "ada@example.com" not in stored and "sk-a1B2" not in stored


def test_layer_1_rules_apply_to_an_mcp_tool(mcp_stdio):
    McpToolOverride.objects.create(
        server=mcp_stdio, tool="add", result_rules=[{"type": "range", "path": "result", "min": 0, "max": 3}]
    )
    run = run_loop(make_run(text="Add"), calls_then_answer(tool_call("team__add", a=2, b=3)))

    (step,) = mcp_steps(run)
    assert step.success is False and step.error_class == "ValidationFailed"
    assert step.validation["status"] == "fail"


def test_mcp_tool_names_never_collide_with_built_ins(mcp_stdio):
    listing = [*mcp_stdio.tool_listing, {"name": "calculator", "description": "x", "input_schema": {"type": "object"}}]
    listing.append({"name": "has.dot", "description": "x", "input_schema": {"type": "object"}})
    McpServer.objects.filter(pk=mcp_stdio.pk).update(tool_listing=listing)

    tools = enabled_tools()

    assert tools["calculator"] is BUILTIN_TOOLS["calculator"]
    assert "team__calculator" in tools and "team__has.dot" not in tools
    assert all("__" in name for name in set(tools) - set(BUILTIN_TOOLS))
    for bad in ["a__b", "team_", "_team", "Team", "te am"]:
        with pytest.raises(Exception, match="name"):
            McpServer(name=bad, command="x").full_clean()


def test_operators_choose_which_tools_are_offered(mcp_stdio):
    McpServer.objects.filter(pk=mcp_stdio.pk).update(expose=["add", "echo", "refund_order"])
    McpToolOverride.objects.create(server=mcp_stdio, tool="echo", enabled=False)
    McpToolOverride.objects.create(server=mcp_stdio, tool="refund_order", sensitive=True, timeout_seconds=2)

    tools = {name: tool for name, tool in enabled_tools().items() if name.startswith("team__")}

    assert sorted(tools) == ["team__add", "team__refund_order"]
    assert tools["team__refund_order"].sensitive and not tools["team__add"].sensitive
    assert tools["team__add"].idempotent and not tools["team__refund_order"].idempotent  # the server's read-only hint
    McpServer.objects.filter(pk=mcp_stdio.pk).update(enabled=False)
    assert not any(name.startswith("team__") for name in enabled_tools())


def test_calls_from_many_threads_and_from_inside_a_running_event_loop(mcp_stdio, tmp_path):
    tools = enabled_tools()
    outcomes = {}

    def call(run_id: int) -> None:
        context = ToolContext(run_id=run_id, workspace=tmp_path)
        outcomes[run_id] = invoker.invoke("team__add", json.dumps({"a": run_id, "b": 1}), context, tools)

    async def inside_a_loop() -> None:
        call(99)  # a thread whose own event loop is running: no "event loop already running"

    threads = [threading.Thread(target=call, args=(n,)) for n in range(1, 7)]
    threads.append(threading.Thread(target=asyncio.run, args=(inside_a_loop(),)))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for run_id in [*range(1, 7), 99]:
        release_run(run_id)

    assert {run_id: o.result for run_id, o in outcomes.items()} == {n: {"result": n + 1} for n in [*range(1, 7), 99]}
    assert mcp_server_processes() == []


def test_the_admin_tests_a_connection_and_lists_the_tools(client, mcp_stdio):
    client.force_login(make_user("root", is_staff=True, is_superuser=True))
    broken = McpServer.objects.create(name="broken", command="/nonexistent/mcp-server", timeout_seconds=5)
    McpToolOverride.objects.create(server=mcp_stdio, tool="crash", enabled=False)
    McpServer.objects.filter(pk=mcp_stdio.pk).update(
        tool_listing=[],
        listed_at=None,  # as if never listed: the action lists it
    )

    response = client.post(
        reverse("admin:feedback_mcpserver_changelist"),
        {"action": "test_connection", "_selected_action": [mcp_stdio.pk, broken.pk], "index": 0, "select_across": 0},
        follow=True,
    )

    text = response.content.decode()
    assert "Team answered with 11 tools; offered: team__add, team__echo, team__pid, team__whoami, team__write" in text
    assert "Team__crash is not offered: disabled by an override." in text
    assert (
        "Broken: could not list its tools. MCP server &#x27;broken&#x27; could not be started "
        "(&#x27;/nonexistent/mcp-server&#x27;: No such file or directory)." in text
    )
    broken.refresh_from_db()
    assert "could not be started" in broken.list_error and broken.tool_listing == []
    page = client.get(reverse("admin:feedback_mcpserver_change", args=[mcp_stdio.pk])).content.decode()
    assert "<code>team__lookup_customer</code>" in page and "Find a customer record by email address." in page


def test_the_admin_escapes_what_a_server_says(client, mcp_stdio):
    client.force_login(make_user("root", is_staff=True, is_superuser=True))
    listing = [{"name": "x", "description": "<script>alert(1)</script>", "input_schema": {"type": "object"}}]
    McpServer.objects.filter(pk=mcp_stdio.pk).update(tool_listing=listing)

    page = client.get(reverse("admin:feedback_mcpserver_change", args=[mcp_stdio.pk])).content.decode()

    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_tool_retrieval_among_fifty_tools_offers_the_right_ones(db, settings):
    """45 tools of a company's systems from one MCP server, plus the built-ins: 53 tools."""
    from .mcp_server import MANY

    register_mcp_server("corp", "--many", expose=list(MANY))
    assert len(enabled_tools()) == len(MANY) + len(BUILTIN_TOOLS) == 53
    tasks = {
        "What will the weather be in Lyon tomorrow? Check the forecast.": "corp__weather_forecast",
        "Open an issue in the bug tracker: the login page is broken.": "corp__tracker_create_issue",
        "Convert 250 euros into US dollars at today's exchange rate.": "corp__currency_convert",
        "Book a meeting room for the design review on Tuesday.": "corp__meeting_room_book",
        "Who is on call for the payments service this week?": "corp__oncall_who",
        "Summarise report.txt in the workspace and count its words.": "read_text_file",
    }
    for text, wanted in tasks.items():
        model = ScriptedModel([LLMReply(content="ok")])
        seen = []
        model.complete = lambda messages, tools, seen=seen: (
            seen.extend(t["function"]["name"] for t in tools) or (LLMReply(content="ok"))
        )
        run = run_loop(make_run(text=text, kind=Task.Kind.GENERAL), model)

        assert run.tool_selection == "lexical"
        assert wanted in run.tools_offered, (text, run.tools_offered)
        assert {"update_plan", "delegate"} <= set(run.tools_offered)  # the engine's own always go
        assert len(run.tools_offered) == settings.TOOL_RETRIEVAL_LIMIT + 2
        assert sorted(seen) == run.tools_offered  # the model was given exactly what the run records
