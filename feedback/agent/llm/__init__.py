"""The model edge: the only part of the product that knows what answers a model call.

- ``reply``: what a call gives back (LLMReply, ToolCall, LLMError, LLMAttempt) and the ChatModel
  protocol the loop talks to;
- ``client``: the one openai client factory (agent, judge, proposals, tool retrieval) and the
  model a run gets (the endpoint's adapter, or the offline demo model);
- ``adapter``: every quirk of an OpenAI-compatible endpoint (text tool calls, forced calls, JSON
  replies, grammar-safe schemas, cut-off replies, refused response formats);
- ``calls``: a model call as a timed step, retried by tenacity, each attempt recorded.
"""

from .calls import ModelCall, call_model
from .client import apply_tool_mode, describe_backend, get_model, openai_client, use_endpoint
from .reply import ChatModel, LLMAttempt, LLMError, LLMReply, ToolCall

__all__ = [
    "ChatModel",
    "LLMAttempt",
    "LLMError",
    "LLMReply",
    "ModelCall",
    "ToolCall",
    "apply_tool_mode",
    "call_model",
    "describe_backend",
    "get_model",
    "openai_client",
    "use_endpoint",
]
