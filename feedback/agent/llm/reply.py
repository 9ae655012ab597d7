"""What a model call gives the loop, whatever answered it: a reply (tool calls, text, or a reply
that cannot be used, with the reason the model is told), or an error."""

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol


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
    # Why the reply cannot be used (a JSON reply that does not parse, a reply cut off at the
    # length limit, calls written as text that are no calls): said to the model, which tries again.
    unusable: str = ""


class LLMError(Exception):
    """The model could not be reached or refused the request. ``retryable`` for transient ones
    (429, 5xx, timeouts, connection); ``timed_out`` when it did not answer in time."""

    def __init__(self, message: str, *, retryable: bool = False, timed_out: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.timed_out = timed_out


@dataclass(frozen=True)
class LLMAttempt:
    """One try of a model call, as its step records it (a StepAttempt row)."""

    number: int
    started_at: datetime
    duration_ms: int
    error: str
    retryable: bool


class ChatModel(Protocol):
    """What the loop talks to: the endpoint's adapter (adapter.py) or the offline demo model."""

    backend: str
    name: str

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> LLMReply: ...
