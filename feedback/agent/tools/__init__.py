"""The tool registry: every tool the agent may call, with its JSON Schema and policy.

Operators enable or disable tools and override timeouts in the admin (ToolSetting), and register
MCP servers whose tools join the built-ins (McpServer, see .mcp); the registry reads both at
each run, so no restart is needed.
"""

from dataclasses import replace

from feedback.models import ToolSetting

from .base import Tool, ToolContext, ToolError
from .calculator import CALCULATOR, calculator
from .engine import DELEGATE, UPDATE_PLAN, delegate, update_plan
from .files import LIST_DIRECTORY, READ_TEXT_FILE, list_directory, read_text_file
from .http import HTTP_GET, http_get
from .mcp import mcp_tools
from .outbox import SEND_REPLY, send_reply
from .text import ANALYZE_TEXT, analyze_text

BUILTIN_TOOLS: dict[str, Tool] = {
    t.name: t
    for t in [
        Tool(
            name="update_plan",
            description="Record your plan as a list of steps with their status "
            "(pending, in_progress, completed, failed). Call it first, and again whenever the plan changes.",
            parameters=UPDATE_PLAN,
            func=update_plan,
            engine=True,
        ),
        Tool(
            name="list_directory",
            description="List the files and folders of a directory in the run's workspace.",
            parameters=LIST_DIRECTORY,
            func=list_directory,
            timeout=5.0,
            result_rules=(
                {
                    "type": "json_schema",
                    "schema": {"type": "object", "required": ["entries"], "properties": {"entries": {"type": "array"}}},
                },
            ),
        ),
        Tool(
            name="read_text_file",
            description="Read a UTF-8 text file from the run's workspace.",
            parameters=READ_TEXT_FILE,
            func=read_text_file,
            timeout=5.0,
            result_rules=({"type": "required_keys", "keys": ["path", "text"]},),
        ),
        Tool(
            name="analyze_text",
            description="Count words, sentences and lines of a text (or a workspace file) "
            "and list its most frequent words.",
            parameters=ANALYZE_TEXT,
            func=analyze_text,
            timeout=5.0,
        ),
        Tool(
            name="calculator",
            description="Evaluate an arithmetic expression exactly.",
            parameters=CALCULATOR,
            func=calculator,
            timeout=2.0,
            cache_ttl=3600,
            workspace_independent=True,
            result_rules=(
                {
                    "type": "json_schema",
                    "schema": {"type": "object", "required": ["value"], "properties": {"value": {"type": "number"}}},
                },
            ),
        ),
        Tool(
            name="http_get",
            description="Fetch a web page or API response from an allow-listed host.",
            parameters=HTTP_GET,
            func=http_get,
            timeout=15.0,
            cache_ttl=60,
            workspace_independent=True,
            result_rules=({"type": "http_status", "allowed": list(range(200, 300))},),
        ),
        Tool(
            name="send_reply",
            description="Send an email reply to a customer. A person must confirm each call.",
            parameters=SEND_REPLY,
            func=send_reply,
            idempotent=False,
            sensitive=True,
        ),
        Tool(
            name="delegate",
            description="Hand a self-contained sub-task to a sub-agent and get its final answer.",
            parameters=DELEGATE,
            func=delegate,
            idempotent=False,
            timeout=300.0,
            engine=True,
        ),
    ]
}


def enabled_tools() -> dict[str, Tool]:
    """The registry as operators configured it right now (enabled flag, timeout override), with
    the tools of the enabled MCP servers (named ``<server>__<tool>``: never a built-in's name)."""

    overrides = {s.name: s for s in ToolSetting.objects.all()}
    tools = {}
    for name, tool in BUILTIN_TOOLS.items():
        setting = overrides.get(name)
        if setting is not None and not setting.enabled:
            continue
        if setting is not None and setting.timeout_seconds:
            tool = replace(tool, timeout=setting.timeout_seconds)
        if setting is not None and setting.config.get("result_rules"):
            # Operators add layer-1 rules in the admin, on top of the tool's own.
            tool = replace(tool, result_rules=(*tool.result_rules, *setting.config["result_rules"]))
        tools[name] = tool
    tools.update(mcp_tools())
    return tools


__all__ = ["BUILTIN_TOOLS", "Tool", "ToolContext", "ToolError", "enabled_tools"]
