"""MCP servers off the run's path: a run's tools come from the stored listings, so a server that
hangs at start costs nothing to a run that does not call it; a hang past a timeout is a
ToolTimeout, as a built-in's is. With the real test server (tests/mcp_server.py) over stdio."""

import json
from datetime import timedelta

import pytest
from django.conf import settings as django_settings
from django.utils import timezone

from feedback.agent.llm import LLMReply, ToolCall
from feedback.agent.tools import enabled_tools
from feedback.agent.tools.mcp import mcp_listings_refresh
from feedback.models import McpServer, McpToolOverride, Run, Step
from feedback.tasks import mcp_listings_refresh_task

from .conftest import MCP_SERVER, mcp_server_processes
from .factories import make_run
from .test_agent_loop import ScriptedModel, run_loop

pytestmark = pytest.mark.django_db


def tool_call(name: str, /, **arguments) -> ToolCall:
    return ToolCall(f"c-{name}-{len(json.dumps(arguments))}", name, json.dumps(arguments))


def calls_then_answer(*calls: ToolCall, answer: str = "Done.") -> ScriptedModel:
    return ScriptedModel([*(LLMReply(tool_calls=[c]) for c in calls), LLMReply(content=answer)])


def hang_at_start(server: McpServer, starts, **fields) -> McpServer:
    """The registered server, from now on a process that starts and never answers (not even
    "initialize"), each start written down in ``starts``; its stored listing is kept."""
    args = [str(MCP_SERVER), "stdio", "--hang-at-start", f"--starts-log={starts}"]
    McpServer.objects.filter(pk=server.pk).update(args=args, **fields)
    server.refresh_from_db()
    return server


def started(starts) -> int:
    return len(starts.read_text().split()) if starts.exists() else 0


def test_a_run_that_does_not_call_a_server_hanging_at_start_never_starts_it(mcp_stdio, tmp_path):
    # Its listing is two hours old: a run used to list it again at its start, and wait
    # for it (the timeout, 30 s, then the process's shutdown).
    starts = tmp_path / "starts.log"
    listed_at = timezone.now() - timedelta(hours=2)
    server = hang_at_start(mcp_stdio, starts, listed_at=listed_at, timeout_seconds=30)

    run = run_loop(make_run(text="What is 6 * 7?"), calls_then_answer(tool_call("calculator", expression="6 * 7")))

    assert run.status == Run.Status.SUCCEEDED, run.error
    assert started(starts) == 0  # the run never started, nor waited for, the server
    assert {"team__add", "team__hang"} <= set(run.tools_offered)  # its tools offered from the stored listing
    (step,) = run.steps.filter(kind=Step.Kind.TOOL_CALL)
    assert (step.tool_name, step.success) == ("calculator", True)
    server.refresh_from_db()
    assert (server.listed_at, server.list_error) == (listed_at, "")  # nobody asked it anything
    assert mcp_server_processes() == []


def test_a_run_calling_a_server_that_hangs_at_start_gets_a_tool_timeout_and_goes_on(mcp_stdio, tmp_path):
    hang_at_start(mcp_stdio, tmp_path / "starts.log", timeout_seconds=3)
    model = calls_then_answer(
        tool_call("team__add", a=2, b=3), tool_call("calculator", expression="2 + 3"), answer="2 + 3 = 5"
    )
    run = run_loop(make_run(text="Add 2 and 3"), model)

    assert run.status == Run.Status.SUCCEEDED, run.error
    assert run.final_output == "2 + 3 = 5"
    added, calculated = run.steps.filter(kind=Step.Kind.TOOL_CALL).order_by("index")
    assert added.success is False
    assert (added.error_class, added.error) == ("ToolTimeout", "MCP server 'team' did not start or connect within 3 s.")
    # Never sent (it did not even start), so safe to try again: each attempt a timeout of its own.
    attempts = list(added.attempt_rows.order_by("number").values_list("error_class", "retryable"))
    assert attempts == [("ToolTimeout", True)] * 3
    assert calculated.success and calculated.result["value"] == 5
    reflection = run.steps.get(kind=Step.Kind.REFLECTION)
    assert "The tool timed out; ask for less, or use another tool." in reflection.thought
    assert mcp_server_processes() == []  # every start was stopped


def test_an_mcp_call_that_hangs_is_recorded_as_a_tool_timeout(mcp_stdio):
    McpToolOverride.objects.create(server=mcp_stdio, tool="hang", timeout_seconds=1)
    run = run_loop(make_run(text="Hang"), calls_then_answer(tool_call("team__hang"), answer="It hung."))

    assert run.status == Run.Status.SUCCEEDED, run.error
    (hung,) = run.steps.filter(kind=Step.Kind.TOOL_CALL)
    assert (hung.error_class, hung.error) == ("ToolTimeout", "MCP server 'team' did not answer hang within 1 s.")
    # The server says it is read-only, so a call that may have run is tried again, as a
    # built-in's timeout is; every attempt is a ToolTimeout.
    assert list(hung.attempt_rows.values_list("error_class", flat=True)) == ["ToolTimeout"] * 3
    assert mcp_server_processes() == []


def test_building_a_runs_tools_asks_no_server(mcp_stdio, tmp_path):
    # Never listed, and hanging at start: the registry leaves it out rather than ask it.
    starts = tmp_path / "starts.log"
    McpServer.objects.create(
        name="wedged", command=mcp_stdio.command, args=[str(MCP_SERVER), "stdio", "--hang-at-start",
        f"--starts-log={starts}"], timeout_seconds=30,
    )  # fmt: skip
    stale = hang_at_start(mcp_stdio, starts, listed_at=timezone.now() - timedelta(days=30))

    tools = enabled_tools()

    assert started(starts) == 0
    assert "team__add" in tools and not any(name.startswith("wedged__") for name in tools)
    stale.refresh_from_db()
    assert stale.list_error == ""


def test_the_refresh_lists_servers_never_listed_or_stale_and_keeps_a_hanging_ones_listing(
    mcp_stdio, tmp_path, settings
):
    settings.MCP_TOOLS_REFRESH_SECONDS = 3600
    fresh = McpServer.objects.create(name="fresh", command=mcp_stdio.command, args=mcp_stdio.args)
    assert fresh.listed_at is None
    starts = tmp_path / "starts.log"
    two_hours_ago = timezone.now() - timedelta(hours=2)
    wedged = hang_at_start(mcp_stdio, starts, listed_at=two_hours_ago, timeout_seconds=2)
    recent = McpServer.objects.create(
        name="recent", command="/nonexistent/never-asked", listed_at=timezone.now(), tool_listing=mcp_stdio.tool_listing
    )

    # Beat's job (every minute): the one never listed is listed; the wedged one fails; the recent one is left alone.
    entries = [e for e in django_settings.CELERY_BEAT_SCHEDULE.values() if e["task"] == mcp_listings_refresh_task.name]
    assert [e["schedule"] for e in entries] == [60.0]
    assert mcp_listings_refresh_task.apply().successful()

    fresh.refresh_from_db()
    assert fresh.listed_at is not None and "add" in {t["name"] for t in fresh.tool_listing}
    assert "fresh__add" in enabled_tools()  # offered to the next runs
    wedged.refresh_from_db()
    assert started(starts) == 1
    assert wedged.list_error == "MCP server 'team' did not start or connect within 2 s."
    assert wedged.listed_at == two_hours_ago and "add" in {t["name"] for t in wedged.tool_listing}
    recent.refresh_from_db()
    assert recent.list_error == ""
    # A server whose listing failed is not asked again at the next tick.
    assert mcp_listings_refresh() == 0 and started(starts) == 1
    McpServer.objects.filter(pk=fresh.pk).update(listed_at=two_hours_ago)
    assert mcp_listings_refresh() == 1  # stale again: listed again
    assert mcp_server_processes() == []
