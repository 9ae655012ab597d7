"""A tool chosen in a reply's text but not called: which tool the adapter asks for outright
(``tool_choice``), so the server writes the call by the tool's schema.

Two readings of a reply without calls, both in the runtime's terms (the tools offered, the
observations it sent), never in any one model's wording:

- **A tool named**: the reply is only a tool's name, or says which one tool it would call, before
  the run has used any tool but the plan (after that an answer may well mention a tool it used).
- **An action announced after a failed call**: "To resolve the issue, I will read the file named
  001-dana.txt" is the next step said, not taken, and not an answer either. The tool is the one
  whose name or description opens with the announced verb (a tool's description says what it
  does, starting with its verb: "Read a UTF-8 text file"). Only the reply's first sentence is
  read ("let me know if ..." closes answers), and an action no offered tool does ("I will answer
  ...") leaves the reply as it is. On the local model 6 of 12 triage runs, once the reflection had
  lost its re-plan sentence, ended "succeeded" with such an announcement as the answer; taken, it
  gave the first successful reads of triage on that model (docs/local-model.md, run 13).
"""

import json
import re
from typing import Any

from feedback.agent.guardrails import ALWAYS_OFFERED

_NAMED_ONLY = re.compile(r"\s*functions\.([\w.-]+?):?\s*")
# The first person announcing a step, in the reply's first sentence: the verb after it is the action.
_ANNOUNCES = re.compile(
    r"[^\n]*?\b(?:I\s+will|I'll|I\s+am\s+going\s+to|I'm\s+going\s+to|let\s+me|let's)\s+(?:now\s+|first\s+|then\s+)?"
    r"([a-z]+)",
    re.I,
)
_SENTENCE_END = re.compile(r"[.!?](?:\s|$)|\n")
_STEM = 6  # "calculate" and "calculator" share their first six letters; "read" is matched whole


def _worked(messages: list[dict[str, Any]]) -> bool:
    """Whether the run has called a tool other than the plan."""
    return any(
        call.get("function", {}).get("name") not in ALWAYS_OFFERED
        for m in messages
        if m.get("role") == "assistant"
        for call in m.get("tool_calls") or []
    )


def chosen_in_text(content: str, tools: list[dict[str, Any]], messages: list[dict[str, Any]]) -> str | None:
    """The offered tool a reply without calls chose: its whole text "functions.<tool>:", or the one
    tool it says it would call ("call analyze_text text=notes.md", "use the `calculator` tool",
    "analyze_text(...)", a call's JSON inside other text) while the run has called no tool but the
    plan. "" when it chose none (or several, or the run has worked with a tool: an answer may well
    mention the tool it used); None when the tool it names is not offered."""
    if not tools:
        return ""
    offered = {t["function"]["name"] for t in tools}
    named = _NAMED_ONLY.fullmatch(content)
    if named is not None:
        return named.group(1) if named.group(1) in offered else None
    if not content or _worked(messages):
        return ""
    intended = {
        name
        for name in offered - ALWAYS_OFFERED
        if re.search(
            rf"\b(?:call|use|invoke|run)\s+(?:the\s+)?[`'\"]?{re.escape(name)}\b|\b{re.escape(name)}\s*\("
            rf"|\"name\":\s*\"{re.escape(name)}\"",
            content,
            re.I,
        )
    }
    return intended.pop() if len(intended) == 1 else ""


def _last_call_failed(messages: list[dict[str, Any]]) -> bool:
    """Whether the latest tool observation the runtime sent reports a failure (``"ok": false``)."""
    for message in reversed(messages):
        if message.get("role") == "tool":
            try:
                observed = json.loads(message.get("content") or "")
            except ValueError:
                return False
            return isinstance(observed, dict) and observed.get("ok") is False
    return False


def _does(verb: str, tool: dict[str, Any]) -> bool:
    words = [*tool["name"].lower().split("_"), *(tool.get("description") or "").lower().split()[:1]]
    return any(word == verb or (len(verb) >= _STEM and word[:_STEM] == verb[:_STEM]) for word in words)


def announced_tool(content: str, tools: list[dict[str, Any]], messages: list[dict[str, Any]]) -> str:
    """After a failed call, the one offered tool whose action the first sentence of a reply without
    calls announces ("I will read ..."), or "" (nothing announced, no call just failed, no one
    tool does it)."""
    first = _SENTENCE_END.split(content or "", maxsplit=1)[0]
    found = _ANNOUNCES.match(first)
    if found is None or not tools or not _last_call_failed(messages):
        return ""
    verb = found.group(1).lower()
    doing = [
        t["function"]["name"]
        for t in tools
        if t["function"]["name"] not in ALWAYS_OFFERED and _does(verb, t["function"])
    ]
    return doing[0] if len(doing) == 1 else ""
