"""The model the agent talks to: any OpenAI-compatible endpoint, or the offline demo model."""

from dataclasses import dataclass, field
from typing import Any, Protocol

from django.conf import settings


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


class LLMError(Exception):
    """The model could not be reached or answered unusably. ``retryable`` for transient ones."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


class ChatModel(Protocol):
    backend: str
    name: str

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> LLMReply: ...


class OpenAIChatModel:
    """Native tool calling through the openai SDK, against any compatible base URL."""

    backend = "openai"

    def __init__(self, *, model: str, base_url: str | None, api_key: str | None, timeout: float):
        import openai

        self.name = model
        self._openai = openai
        self._client = openai.OpenAI(
            base_url=base_url or None,
            api_key=api_key or "not-needed",
            timeout=timeout,
            max_retries=3,
        )

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> LLMReply:
        openai = self._openai
        try:
            response = self._client.chat.completions.create(
                model=self.name, messages=messages, tools=tools or openai.omit
            )
        except (openai.APITimeoutError, openai.APIConnectionError, openai.RateLimitError) as exc:
            raise LLMError(f"{type(exc).__name__}: {exc}", retryable=True) from exc
        except openai.InternalServerError as exc:
            raise LLMError(f"{type(exc).__name__}: {exc}", retryable=True) from exc
        except openai.APIError as exc:
            raise LLMError(f"{type(exc).__name__}: {exc}") from exc
        if not response.choices:
            return LLMReply()
        message = response.choices[0].message
        calls = [
            ToolCall(id=c.id, name=c.function.name, arguments=c.function.arguments or "")
            for c in (message.tool_calls or [])
            if getattr(c, "function", None) is not None
        ]
        usage = response.usage
        return LLMReply(
            content=message.content or "",
            tool_calls=calls,
            tokens_in=getattr(usage, "prompt_tokens", 0) or 0,
            tokens_out=getattr(usage, "completion_tokens", 0) or 0,
        )


def use_endpoint() -> bool:
    if settings.LLM_BACKEND == "offline":
        return False
    if settings.LLM_BACKEND == "openai":
        return True
    return bool(settings.OPENAI_BASE_URL or settings.OPENAI_API_KEY)


def get_model() -> ChatModel:
    if use_endpoint():
        return OpenAIChatModel(
            model=settings.LLM_MODEL,
            base_url=settings.OPENAI_BASE_URL,
            api_key=settings.OPENAI_API_KEY,
            timeout=settings.LLM_TIMEOUT_SECONDS,
        )
    from .offline import OfflineDemoModel

    return OfflineDemoModel()


def describe_backend() -> str:
    """How the UI names the model in use; the offline one is never passed off as an LLM."""
    if use_endpoint():
        return f"{settings.LLM_MODEL} at {settings.OPENAI_BASE_URL or 'api.openai.com'}"
    return "Offline demo model (rule-based, no LLM)"
