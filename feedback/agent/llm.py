"""The model the agent talks to: any OpenAI-compatible endpoint, or the offline demo model."""

import json
import logging
import random
import re
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol
from urllib.parse import urlsplit

from django.conf import settings
from django.utils import timezone

from .tool_choice import chosen_in_text
from .tool_prompts import grammar_safe_tools, json_mode_messages

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    # The raw JSON text the model produced: it may be malformed, and that is recorded as such.
    arguments: str


@dataclass(frozen=True)
class LLMReply:
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    tokens_in: int = 0
    tokens_out: int = 0
    # Set when the reply could not be understood (JSON mode): the model is told why.
    malformed: str = ""


class LLMError(Exception):
    """The model could not be reached or answered unusably. ``retryable`` for transient ones."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


@dataclass(frozen=True)
class LLMAttempt:
    number: int
    started_at: datetime
    duration_ms: int
    error: str
    retryable: bool


class ChatModel(Protocol):
    backend: str
    name: str

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> LLMReply: ...


_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$", re.I)


def parse_json_reply(text: str, turn_id: str) -> LLMReply:
    """Read a JSON-mode reply strictly; anything else is a malformed reply, not a crash."""
    stripped = _FENCE.sub("", text.strip())
    try:
        data = json.loads(stripped)
    except json.JSONDecodeError as exc:
        return LLMReply(content=text, malformed=f"Your reply was not valid JSON ({exc.msg}).")
    except RecursionError:
        return LLMReply(content=text[:2000], malformed="Your reply was nested too deeply.")
    if not isinstance(data, dict):
        return LLMReply(content=text, malformed="Your reply must be a JSON object.")
    if isinstance(data.get("final_answer"), str):
        return LLMReply(content=data["final_answer"])
    calls = data.get("tool_calls")
    if not isinstance(calls, list) or not calls:
        return LLMReply(content=text, malformed="Reply with 'tool_calls' (a non-empty list) or 'final_answer'.")
    parsed = []
    for i, call in enumerate(calls):
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            return LLMReply(content=text, malformed=f"tool_calls[{i}] needs a 'name' string.")
        arguments = call.get("arguments", {})
        raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
        parsed.append(ToolCall(id=f"{turn_id}-{i}", name=call["name"], arguments=raw))
    return LLMReply(content=str(data.get("thought") or ""), tool_calls=parsed)


class OpenAIChatModel:
    """Native tool calling through the openai SDK, against any compatible base URL.

    Retries are ours, not the SDK's, so every attempt can be recorded on the run.
    """

    backend = "openai"

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None,
        api_key: str | None,
        timeout: float,
        tool_mode: str,
        max_tokens: int = 0,
        grammar_safe_schemas: bool = False,
    ):
        import openai

        self.name = model
        self.tool_mode = tool_mode
        self.max_tokens = max_tokens
        self.grammar_safe_schemas = grammar_safe_schemas
        self._openai = openai
        self._client = openai.OpenAI(
            base_url=base_url or None, api_key=api_key or "not-needed", timeout=timeout, max_retries=0
        )
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

    def _create(self, **kwargs: Any) -> Any:
        openai = self._openai
        if self.max_tokens:
            kwargs["max_tokens"] = self.max_tokens
        if settings.LLM_TEMPERATURE is not None:
            kwargs["temperature"] = settings.LLM_TEMPERATURE
        try:
            return self._client.chat.completions.create(model=self.name, **kwargs)
        except (openai.APITimeoutError, openai.APIConnectionError) as exc:
            raise LLMError(f"{type(exc).__name__}: {exc}", retryable=True) from exc
        except (openai.RateLimitError, openai.InternalServerError) as exc:
            raise LLMError(f"{type(exc).__name__} ({exc.status_code}): {exc.message}", retryable=True) from exc
        except openai.APIStatusError as exc:
            raise LLMError(f"{type(exc).__name__} ({exc.status_code}): {exc.message}") from exc
        except openai.APIError as exc:
            raise LLMError(f"{type(exc).__name__}: {exc}") from exc

    def _complete_native(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> LLMReply:
        omit = self._openai.omit
        # tool_choice said outright: llama-cpp-python's function-calling chat format renders no
        # tools at all without it, so the model never learns it has any.
        response = self._create(messages=messages, tools=tools or omit, tool_choice="auto" if tools else omit)
        reply = _calls_in_text(self._native_reply(response), tools, turn_id=getattr(response, "id", "") or "text")
        chosen = "" if reply.tool_calls else chosen_in_text(reply.content, tools, messages)
        if chosen is None:
            return LLMReply(
                content=reply.content, tokens_in=reply.tokens_in, tokens_out=reply.tokens_out,
                malformed="Your reply named a tool that is not offered instead of calling a tool or answering.",
            )  # fmt: skip
        if chosen:
            # The server gave back a tool's name as text ("functions.analyze_text:"): once the
            # model chooses to write a message, llama-cpp-python's chatml-function-calling lets it
            # write only a tool's name or nothing. Or the model wrote which tool it would call
            # instead of calling it. The model's choice stands: ask for that tool's call outright,
            # which the server then writes by the tool's schema.
            forced = {"type": "function", "function": {"name": chosen}}
            second = self._native_reply(self._create(messages=messages, tools=tools, tool_choice=forced))
            reply = LLMReply(
                content=second.content, tool_calls=second.tool_calls, malformed=second.malformed,
                tokens_in=reply.tokens_in + second.tokens_in, tokens_out=reply.tokens_out + second.tokens_out,
            )  # fmt: skip
        return reply

    def _native_reply(self, response: Any) -> LLMReply:
        if not response.choices:
            return LLMReply(**_usage(response))
        choice = response.choices[0]
        message = choice.message
        calls = [
            ToolCall(id=c.id or f"call-{i}", name=c.function.name or "", arguments=c.function.arguments or "")
            for i, c in enumerate(message.tool_calls or [])
            if getattr(c, "function", None) is not None
        ]
        return LLMReply(
            content=message.content or "", tool_calls=calls, malformed=self._cut_off(choice), **_usage(response)
        )

    def _complete_json(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> LLMReply:
        self._calls += 1
        response = self._create(messages=json_mode_messages(messages, tools))
        choice = response.choices[0] if response.choices else None
        text = (choice.message.content or "") if choice else ""
        reply = parse_json_reply(text, turn_id=f"json-{self._calls}")
        malformed = (self._cut_off(choice) if choice else "") or reply.malformed
        usage = _usage(response)
        return LLMReply(content=reply.content, tool_calls=reply.tool_calls, malformed=malformed, **usage)

    def _cut_off(self, choice: Any) -> str:
        """Why a reply that hit the token limit is unusable: half an answer or half a call's
        arguments is not something to act on, and the model can be told to be brief."""
        if getattr(choice, "finish_reason", None) != "length":
            return ""
        limit = f" of {self.max_tokens} tokens" if self.max_tokens else ""
        return f"Your reply was cut off at the length limit{limit}: reply more briefly."


# Calls a server left in the text: a model's own chat template (Qwen2.5, Hermes and their kin, as
# llama.cpp's server renders it without a function-calling format) writes each call as
# <tool_call>{"name": ..., "arguments": {...}}</tool_call>, and the server passes it on as content.
_TAGGED_CALL = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.S)


def _calls_in_text(reply: LLMReply, tools: list[dict[str, Any]], *, turn_id: str) -> LLMReply:
    """A reply whose calls came back as its text: <tool_call> tags, or (small models do it) the
    whole reply one JSON call of an offered tool, fenced or not. Anything else stays text."""
    if reply.tool_calls or not tools:
        return reply
    content, calls = reply.content, []
    if _TAGGED_CALL.search(content):
        content, calls = tagged_tool_calls(content, turn_id=turn_id)
    else:
        try:
            data = json.loads(_FENCE.sub("", content.strip()))
        except (ValueError, RecursionError):
            data = None
        offered = {t["function"]["name"] for t in tools}
        items = data if isinstance(data, list) else [data]
        if items and all(isinstance(d, dict) and d.get("name") in offered and "arguments" in d for d in items):
            content = ""
            calls = [
                ToolCall(id=f"{turn_id}-{i}", name=d["name"],
                         arguments=d["arguments"] if isinstance(d["arguments"], str) else json.dumps(d["arguments"]))
                for i, d in enumerate(items)
            ]  # fmt: skip
    if not calls:
        attempt = "" if reply.malformed else _failed_attempt(reply.content, {t["function"]["name"] for t in tools})
        if not attempt:
            return reply
        return LLMReply(content=reply.content, malformed=attempt, tokens_in=reply.tokens_in,
                        tokens_out=reply.tokens_out)  # fmt: skip
    return LLMReply(content=content, tool_calls=calls, malformed=reply.malformed,
                    tokens_in=reply.tokens_in, tokens_out=reply.tokens_out)  # fmt: skip


# What a small model writes when it means to call a tool and does not manage to: pseudo-markup
# (<tools><function name="read_file" …>) or a call's JSON that does not parse. Taken for an
# answer, it ended the run "answered" with no work done; as a malformed reply the model is told.
_PSEUDO_MARKUP = re.compile(r"<(?:tools|function|tool_call)\b", re.I)
_CALL_START = re.compile(r'\{\s*"name"\s*:\s*"([^"]+)"')


def _failed_attempt(content: str, offered: set[str]) -> str:
    """Why a reply is a failed attempt at a call rather than an answer, or "" when it is not one."""
    text = _FENCE.sub("", content.strip())
    start = _CALL_START.match(text)
    if start and start.group(1) in offered:
        return (f"Your reply looks like a call of {start.group(1)} but is not valid JSON: call tools through "
                "the tool-calling format, or answer in words.")  # fmt: skip
    if _PSEUDO_MARKUP.search(content):
        return "Your reply wrote tool calls as text instead of making them: call tools, or answer in words."
    return ""


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
            arguments = data.get("arguments", {})
            raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
            calls.append(ToolCall(id=f"{turn_id}-{i}", name=data["name"], arguments=raw))
        else:
            calls.append(ToolCall(id=f"{turn_id}-{i}", name="", arguments=body))
    return _TAGGED_CALL.sub("", content).strip(), calls


def _usage(response: Any) -> dict[str, int]:
    usage = getattr(response, "usage", None)
    return {
        "tokens_in": getattr(usage, "prompt_tokens", 0) or 0,
        "tokens_out": getattr(usage, "completion_tokens", 0) or 0,
    }


def complete_with_retries(
    model: ChatModel, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
) -> tuple[LLMReply | None, list[LLMAttempt], LLMError | None]:
    """Call the model, retrying only transient errors (429, 5xx, timeouts, connection) with
    exponential backoff and jitter. Returns the reply, every failed attempt, and the final
    error when it gave up."""
    attempts: list[LLMAttempt] = []
    for number in range(1, settings.LLM_MAX_ATTEMPTS + 1):
        started, t0 = timezone.now(), time.monotonic()
        try:
            return model.complete(messages, tools), attempts, None
        except LLMError as exc:
            duration = int((time.monotonic() - t0) * 1000)
            attempts.append(LLMAttempt(number, started, duration, str(exc), exc.retryable))
            if not exc.retryable or number == settings.LLM_MAX_ATTEMPTS:
                return None, attempts, exc
            # "Equal jitter": half the backoff is certain, half random. Full jitter could spend
            # every attempt within milliseconds and fail a run on a short outage; this way a run
            # rides out an outage of at least LLM_BACKOFF_SECONDS * (2 ** (LLM_MAX_ATTEMPTS - 1) - 1) / 2.
            backoff = settings.LLM_BACKOFF_SECONDS * 2 ** (number - 1)
            time.sleep(backoff / 2 + random.uniform(0, backoff / 2))
    raise AssertionError("unreachable")


def use_endpoint() -> bool:
    if settings.LLM_BACKEND == "offline":
        return False
    if settings.LLM_BACKEND == "openai":
        return True
    return bool(settings.OPENAI_BASE_URL or settings.OPENAI_API_KEY)


def grammar_safe_schemas() -> bool:
    """Whether tools go to the endpoint without length and pattern bounds (LLM_GRAMMAR_SAFE_SCHEMAS:
    "auto" for any endpoint but OpenAI's own, whose servers may constrain decoding by grammar)."""
    mode = settings.LLM_GRAMMAR_SAFE_SCHEMAS
    if mode == "auto":
        host = urlsplit(settings.OPENAI_BASE_URL).hostname or "api.openai.com"
        return host != "api.openai.com"
    return mode == "on"


def get_model() -> ChatModel:
    if use_endpoint():
        return OpenAIChatModel(
            model=settings.LLM_MODEL,
            base_url=settings.OPENAI_BASE_URL,
            api_key=settings.OPENAI_API_KEY,
            timeout=settings.LLM_TIMEOUT_SECONDS,
            tool_mode=settings.LLM_TOOL_MODE,
            max_tokens=settings.LLM_MAX_TOKENS,
            grammar_safe_schemas=grammar_safe_schemas(),
        )
    from .offline import OfflineDemoModel

    return OfflineDemoModel()


def describe_backend() -> str:
    """How the UI names the model in use; the offline one is never passed off as an LLM."""
    if use_endpoint():
        return f"{settings.LLM_MODEL} at {settings.OPENAI_BASE_URL or 'the OpenAI API'}"
    return "Offline demo model (rule-based, no LLM)"
