"""The tool registry: every tool the agent may call, with its JSON Schema and policy.

Operators enable or disable tools in the admin (ToolSetting); the registry reads those
settings at each run, so no restart is needed.
"""

from .base import Tool, ToolContext, ToolError
from .calculator import CALCULATOR, calculator
from .files import LIST_DIRECTORY, READ_TEXT_FILE, list_directory, read_text_file
from .text import ANALYZE_TEXT, analyze_text

BUILTIN_TOOLS: dict[str, Tool] = {
    t.name: t
    for t in [
        Tool(
            name="list_directory",
            description="List the files and folders of a directory in the run's workspace.",
            parameters=LIST_DIRECTORY,
            func=list_directory,
            timeout=5.0,
        ),
        Tool(
            name="read_text_file",
            description="Read a UTF-8 text file from the run's workspace.",
            parameters=READ_TEXT_FILE,
            func=read_text_file,
            timeout=5.0,
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
        ),
    ]
}


def enabled_tools() -> dict[str, Tool]:
    from feedback.models import ToolSetting

    disabled = set(ToolSetting.objects.filter(enabled=False).values_list("name", flat=True))
    return {name: tool for name, tool in BUILTIN_TOOLS.items() if name not in disabled}


__all__ = ["BUILTIN_TOOLS", "Tool", "ToolContext", "ToolError", "enabled_tools"]
