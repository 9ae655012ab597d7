"""The endpoint adapter: every quirk of an OpenAI-compatible server is handled here, so the loop
sees replies (tool calls, text, or an unusable reply with the reason) and nothing of the server.

- **Tools refused** (a server without tool support): JSON replies instead, for good (``auto``),
  the conversation rewritten for them and the reply parsed strictly (``json`` mode).
- **Grammar-safe schemas**: a server that decodes by grammar (llama.cpp builds one from each tool's
  JSON Schema) crashed on ``maxLength: 200000``; length, count and pattern bounds are left out of
  what it is shown. The invoker still validates every call against the full schema.
- **Calls written as text**: a chat template that writes ``<tool_call>{…}</tool_call>`` into the
  content, or a reply that is one JSON call of an offered tool, are calls; text that looks like a
  call and is none (pseudo-markup, a call's JSON that does not parse) is an unusable reply.
- **A tool chosen but not called** (chosen.py): a reply that is only a tool's name
  (``functions.<tool>:``, what a function-calling format leaves once the model writes text) or
  that says which one tool it would call, before the run has used any tool but the plan, or that
  announces its next action after a failed call ("I will read the file named ..."), is asked
  again with that tool's call forced (``tool_choice``), which the server then writes by the
  tool's schema.
- **Cut off** at the length limit: unusable (half a call is nothing to act on).
- **Refused response formats**: in formats.py (structured answers for the judge and proposals).
"""

import json
import logging
import re
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings

from .chosen import announced_tool, chosen_in_text
from .reply import LLMError, LLMReply, ToolCall

logger = logging.getLogger(__name__)


def create(client: Any, **kwargs: Any) -> Any:
    """One chat completion; the SDK's errors as LLMError, retryable or not."""
    import openai

    try:
        return client.chat.completions.create(**kwargs)
    except openai.APITimeoutError as exc:
        raise LLMError(f"{type(exc).__name__}: {exc}", retryable=True, timed_out=True) from exc
    except openai.APIConnectionError as exc:
        raise LLMError(f"{type(exc).__name__}: {exc}", retryable=True) from exc
    except (openai.RateLimitError, openai.InternalServerError) as exc:
        raise LLMError(f"{type(exc).__name__} ({exc.status_code}): {exc.message}", retryable=True) from exc
    except openai.APIStatusError as exc:
        raise LLMError(f"{type(exc).__name__} ({exc.status_code}): {exc.message}") from exc
    except openai.APIError as exc:
        raise LLMError(f"{type(exc).__name__}: {exc}") from exc


def usage(response: Any) -> dict[str, int]:
    usage = getattr(response, "usage", None)
    return {
        "tokens_in": getattr(usage, "prompt_tokens", 0) or 0,
        "tokens_out": getattr(usage, "completion_tokens", 0) or 0,
    }


class EndpointModel:
    """A ChatModel on an OpenAI-compatible endpoint (one per run: its tool mode may change)."""

    backend = "openai"

    def __init__(
        self, client: Any, *, model: str, tool_mode: str, max_tokens: int = 0, grammar_safe_schemas: bool = False
    ) -> None:
        self.name = model
        self.tool_mode = tool_mode
        self.max_tokens = max_tokens
        self.grammar_safe_schemas = grammar_safe_schemas
        self._client = client
        self._calls = 0

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> LLMReply:
        if self.grammar_safe_schemas:
            tools = grammar_safe_tools(tools)
        if self.tool_mode == "json":
            return self._complete_json(messages, tools)
        try:
            return self._complete_native(messages, tools)
        except LLMError as exc:
            # Servers without tool support refuse the `tools` parameter: fall back for good.
            if self.tool_mode == "auto" and not exc.retryable and "tool" in str(exc).lower():
                logger.warning("endpoint refused native tools; switching to JSON replies: %s", exc)
                self.tool_mode = "json"
                return self._complete_json(messages, tools)
            raise

    def create(self, *, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
        # Content always a string: OpenAI takes null beside tool calls, but llama-cpp-python's
        # server answers it with a 500 (on every turn after the first call).
        kwargs["messages"] = [m if m.get("content") is not None else {**m, "content": ""} for m in messages]
        if self.max_tokens:
            kwargs["max_tokens"] = self.max_tokens
        if settings.LLM_TEMPERATURE is not None:
            kwargs["temperature"] = settings.LLM_TEMPERATURE
        return create(self._client, model=self.name, **kwargs)

    def _complete_native(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> LLMReply:
        import openai

        omit = openai.omit
        # tool_choice said outright: llama-cpp-python's function-calling chat format renders no
        # tools at all without it, so the model never learns it has any.
        response = self.create(messages=messages, tools=tools or omit, tool_choice="auto" if tools else omit)
        reply = _calls_in_text(self._native_reply(response), tools, turn_id=getattr(response, "id", "") or "text")
        chosen = "" if reply.tool_calls else chosen_in_text(reply.content, tools, messages)
        if chosen == "" and not reply.tool_calls:
            chosen = announced_tool(reply.content, tools, messages)
        if chosen is None:
            return LLMReply(
                content=reply.content,
                tokens_in=reply.tokens_in,
                tokens_out=reply.tokens_out,
                unusable="Your reply named a tool that is not offered instead of calling a tool or answering.",
            )
        if chosen:
            forced = {"type": "function", "function": {"name": chosen}}
            second = self._native_reply(self.create(messages=messages, tools=tools, tool_choice=forced))
            reply = LLMReply(
                content=second.content,
                tool_calls=second.tool_calls,
                unusable=second.unusable,
                tokens_in=reply.tokens_in + second.tokens_in,
                tokens_out=reply.tokens_out + second.tokens_out,
            )
        return reply

    def _native_reply(self, response: Any) -> LLMReply:
        if not response.choices:
            return LLMReply(**usage(response))
        choice = response.choices[0]
        message = choice.message
        calls = [
            ToolCall(id=c.id or f"call-{i}", name=c.function.name or "", arguments=c.function.arguments or "")
            for i, c in enumerate(message.tool_calls or [])
            if getattr(c, "function", None) is not None
        ]
        return LLMReply(
            content=message.content or "", tool_calls=calls, unusable=self._cut_off(choice), **usage(response)
        )

    def _complete_json(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> LLMReply:
        self._calls += 1
        response = self.create(messages=json_mode_messages(messages, tools))
        choice = response.choices[0] if response.choices else None
        text = (choice.message.content or "") if choice else ""
        reply = parse_json_reply(text, turn_id=f"json-{self._calls}")
        unusable = (self._cut_off(choice) if choice else "") or reply.unusable
        return LLMReply(content=reply.content, tool_calls=reply.tool_calls, unusable=unusable, **usage(response))

    def _cut_off(self, choice: Any) -> str:
        """Why a reply that hit the token limit is unusable (the model can be told to be brief)."""
        if getattr(choice, "finish_reason", None) != "length":
            return ""
        limit = f" of {self.max_tokens} tokens" if self.max_tokens else ""
        return f"Your reply was cut off at the length limit{limit}: reply more briefly."


# --- calls written as text ----------------------------------------------------------------------
_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$", re.I)
# A chat template's own call format (Hermes-style templates, as llama.cpp's server renders them
# without a function-calling format): <tool_call>{"name": ..., "arguments": {...}}</tool_call>.
_TAGGED_CALL = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.S)
# Text meant as a call that is none: pseudo-markup, or a call's JSON that does not parse.
_PSEUDO_MARKUP = re.compile(r"<(?:tools|function|tool_call)\b", re.I)
_CALL_START = re.compile(r'\{\s*"name"\s*:\s*"([^"]+)"')
# The same templates' tag for a tool's result: a reply writing one makes up what a tool returned.
_TOOL_RESPONSE = re.compile(r"<tool_response\b", re.I)
# A call in a Markdown code block inside prose ("Let's start: ```json {"name": ...} ```").
_FENCED_BLOCK = re.compile(r"```(?:json)?[ \t]*\n?(.*?)```", re.S | re.I)


def _json_arguments(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def _calls_in_text(reply: LLMReply, tools: list[dict[str, Any]], *, turn_id: str) -> LLMReply:
    """A reply whose calls came back as its text: <tool_call> tags, or the whole reply one JSON
    call (or a list of them) of offered tools, fenced or not. Anything else stays text."""
    if reply.tool_calls or not tools:
        return reply
    offered = {t["function"]["name"] for t in tools}
    content, calls = reply.content, []
    if _TAGGED_CALL.search(content):
        content, calls = tagged_tool_calls(content, turn_id=turn_id)
    elif (fenced := _fenced_calls(content, offered, turn_id=turn_id)) is not None:
        content, calls = fenced
    else:
        try:
            data = json.loads(_FENCE.sub("", content.strip()))
        except (ValueError, RecursionError):
            data = None
        items = data if isinstance(data, list) else [data]
        if items and all(isinstance(d, dict) and d.get("name") in offered and "arguments" in d for d in items):
            content = ""
            calls = [
                ToolCall(f"{turn_id}-{i}", d["name"], _json_arguments(d["arguments"])) for i, d in enumerate(items)
            ]
    if not calls:
        attempt = "" if reply.unusable else _failed_attempt(reply.content, offered)
        if not attempt:
            return reply
        return LLMReply(content=reply.content, unusable=attempt, tokens_in=reply.tokens_in, tokens_out=reply.tokens_out)
    return LLMReply(
        content=content,
        tool_calls=calls,
        unusable=reply.unusable,
        tokens_in=reply.tokens_in,
        tokens_out=reply.tokens_out,
    )


def _fenced_calls(content: str, offered: set[str], *, turn_id: str) -> tuple[str, list[ToolCall]] | None:
    """The calls of a reply that narrates them in prose, each in a code block of its own, and the
    prose around them (its thought); None unless every code block is a call of an offered tool. A
    small model plans this way ("1. List the files... ```json {"name": "list_directory", ...}```"):
    taken for its answer, the plan ended the run."""
    blocks = list(_FENCED_BLOCK.finditer(content))
    calls = []
    for i, block in enumerate(blocks):
        try:
            data = json.loads(block.group(1))
        except (ValueError, RecursionError):
            return None
        if not (isinstance(data, dict) and data.get("name") in offered and "arguments" in data):
            return None
        calls.append(ToolCall(f"{turn_id}-{i}", data["name"], _json_arguments(data["arguments"])))
    return (_FENCED_BLOCK.sub("", content).strip(), calls) if calls else None


def _failed_attempt(content: str, offered: set[str]) -> str:
    """Why a reply is a failed attempt at a call rather than an answer, or "" when it is not one."""
    start = _CALL_START.match(_FENCE.sub("", content.strip()))
    if start and start.group(1) in offered:
        return (
            f"Your reply looks like a call of {start.group(1)} but is not valid JSON: call tools through "
            "the tool-calling format, or answer in words."
        )
    if _PSEUDO_MARKUP.search(content) or _tool_tag(content, offered):
        return "Your reply wrote tool calls as text instead of making them: call tools, or answer in words."
    if _TOOL_RESPONSE.search(content):
        return (
            "Your reply wrote a tool's response itself: a tool's result comes only from calling the tool. "
            "Call it, or answer from the results tools have returned."
        )
    return ""


def _tool_tag(content: str, offered: set[str]) -> bool:
    """Whether the reply opens a tag named after an offered tool (``<update_plan steps=[...]>``):
    a call in a markup of the model's own making, which no answer starts."""
    return any(re.search(rf"<{re.escape(name)}\b", content) for name in offered)


def tagged_tool_calls(content: str, *, turn_id: str) -> tuple[str, list[ToolCall]]:
    """The calls written as <tool_call> tags in ``content``, and the text around them. A tag whose
    JSON does not parse is kept as a call with its raw text, so the invoker records it as the
    malformed call it is rather than the reply passing for an answer."""
    calls = []
    for i, found in enumerate(_TAGGED_CALL.finditer(content)):
        body = _FENCE.sub("", found.group(1))
        try:
            data = json.loads(body)
        except (ValueError, RecursionError):
            data = None
        if isinstance(data, dict) and isinstance(data.get("name"), str):
            calls.append(ToolCall(f"{turn_id}-{i}", data["name"], _json_arguments(data.get("arguments", {}))))
        else:
            calls.append(ToolCall(f"{turn_id}-{i}", "", body))
    return _TAGGED_CALL.sub("", content).strip(), calls


# --- grammar-safe schemas -------------------------------------------------------------------------
# Keywords a grammar-constrained decoder expands into one rule per allowed length or item.
_GRAMMAR_HEAVY = frozenset({"maxLength", "minLength", "pattern", "format", "maxItems", "minItems", "uniqueItems"})


def grammar_safe_schemas() -> bool:
    """Whether tools go to the endpoint without length and pattern bounds (LLM_GRAMMAR_SAFE_SCHEMAS:
    "auto" for any endpoint but OpenAI's own, whose servers may constrain decoding by grammar)."""
    mode = settings.LLM_GRAMMAR_SAFE_SCHEMAS
    if mode == "auto":
        return (urlsplit(settings.OPENAI_BASE_URL).hostname or "api.openai.com") != "api.openai.com"
    return mode == "on"


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


# --- JSON replies, for a server without tool calling ------------------------------------------------
JSON_MODE_INSTRUCTIONS = """You cannot call tools natively. Reply with ONE JSON object and nothing else:
{"thought": "...", "tool_calls": [{"name": "<tool>", "arguments": {...}}]} to call tools, or
{"final_answer": "..."} when you are done. The tools:
"""


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


def parse_json_reply(text: str, turn_id: str) -> LLMReply:
    """Read a JSON-mode reply strictly; anything else is an unusable reply, not a crash."""
    try:
        data = json.loads(_FENCE.sub("", text.strip()))
    except json.JSONDecodeError as exc:
        return LLMReply(content=text, unusable=f"Your reply was not valid JSON ({exc.msg}).")
    except RecursionError:
        return LLMReply(content=text[:2000], unusable="Your reply was nested too deeply.")
    if not isinstance(data, dict):
        return LLMReply(content=text, unusable="Your reply must be a JSON object.")
    if isinstance(data.get("final_answer"), str):
        return LLMReply(content=data["final_answer"])
    calls = data.get("tool_calls")
    if not isinstance(calls, list) or not calls:
        return LLMReply(content=text, unusable="Reply with 'tool_calls' (a non-empty list) or 'final_answer'.")
    parsed = []
    for i, call in enumerate(calls):
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            return LLMReply(content=text, unusable=f"tool_calls[{i}] needs a 'name' string.")
        parsed.append(ToolCall(f"{turn_id}-{i}", call["name"], _json_arguments(call.get("arguments", {}))))
    return LLMReply(content=str(data.get("thought") or ""), tool_calls=parsed)


# --- a JSON answer, in the strictest response format the endpoint takes ---------------------------
