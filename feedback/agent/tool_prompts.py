"""What goes to an endpoint about the tools: their schemas as a grammar-constrained decoder can
take them, and the conversation rewritten for a model without tool calling (JSON replies)."""

import json
from typing import Any

JSON_MODE_INSTRUCTIONS = """You cannot call tools natively. Reply with ONE JSON object and nothing else:
{"thought": "...", "tool_calls": [{"name": "<tool>", "arguments": {...}}]} to call tools, or
{"final_answer": "..."} when you are done. The tools:
"""

# Keywords a grammar-constrained decoder (llama.cpp turns a tool's JSON Schema into a grammar)
# expands into one rule per allowed length or item: maxLength 200000 alone exceeds its rule limit
# and crashed the server. The invoker still validates every call against the full schema, so a
# model that overshoots gets the same clear argument error, just after the call instead of before.
_GRAMMAR_HEAVY = frozenset({"maxLength", "minLength", "pattern", "format", "maxItems", "minItems", "uniqueItems"})


def grammar_safe(schema: Any) -> Any:
    """``schema`` without the keywords that blow up grammar-constrained decoding."""
    if isinstance(schema, dict):
        return {k: grammar_safe(v) for k, v in schema.items() if k not in _GRAMMAR_HEAVY}
    if isinstance(schema, list):
        return [grammar_safe(v) for v in schema]
    return schema


def grammar_safe_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {**t, "function": {**t["function"], "parameters": grammar_safe(t["function"]["parameters"])}} for t in tools
    ]


def json_mode_messages(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rewrite a tool-calling conversation for a model without tool support."""
    # Compact: this catalogue is the bulk of every JSON-mode prompt, and a local server's context
    # (llama.cpp's default is 2,048 tokens) has to hold it with the conversation.
    catalogue = "\n".join(
        f"- {t['function']['name']}: {t['function']['description']} "
        f"Parameters: {json.dumps(grammar_safe(t['function']['parameters']), separators=(',', ':'))}"
        for t in tools
    )
    out: list[dict[str, Any]] = []
    for m in messages:
        if m["role"] == "system":
            out.append({"role": "system", "content": f"{m['content']}\n\n{JSON_MODE_INSTRUCTIONS}{catalogue}"})
        elif m["role"] == "assistant":
            calls = [
                {"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
                for c in m.get("tool_calls") or []
            ]
            body = {"thought": m.get("content") or "", "tool_calls": calls} if calls else None
            out.append({"role": "assistant", "content": json.dumps(body) if body else m.get("content") or ""})
        elif m["role"] == "tool":
            out.append({"role": "user", "content": f"Tool result ({m['tool_call_id']}): {m['content']}"})
        else:
            out.append(m)
    return out
