"""The one way to the model endpoint: which model answers (an OpenAI-compatible endpoint through
the adapter, or the offline demo model), and the openai client every use shares (the agent, the
judge, proposal writing, tool retrieval), so the endpoint, its key and its timeout are read in
one place and the SDK never retries behind the product's back."""

from collections.abc import Callable
from typing import TYPE_CHECKING

from django.conf import settings

from .reply import ChatModel

if TYPE_CHECKING:
    import openai


def use_endpoint() -> bool:
    if settings.LLM_BACKEND == "offline":
        return False
    if settings.LLM_BACKEND == "openai":
        return True
    return bool(settings.OPENAI_BASE_URL or settings.OPENAI_API_KEY)


def openai_client(*, max_retries: int = 0) -> "openai.OpenAI":
    """A client of the configured endpoint. ``max_retries``: the SDK's own retries, none by
    default: the agent's model calls are retried by call_model (calls.py), which records each
    attempt; a failed judgement is recorded and can be run again by a reviewer."""
    import openai

    return openai.OpenAI(
        base_url=settings.OPENAI_BASE_URL or None,
        api_key=settings.OPENAI_API_KEY or "not-needed",
        timeout=settings.LLM_TIMEOUT_SECONDS,
        max_retries=max_retries,
    )


def get_model(name: str = "") -> ChatModel:
    """The model a run talks to (one per run: a strategy may set its tool mode); ``name``: another
    model of the configured endpoint (an experiment's treatment arm), the configured one if empty."""
    if use_endpoint():
        from .adapter import EndpointModel, grammar_safe_schemas

        return EndpointModel(
            openai_client(),
            model=name or settings.LLM_MODEL,
            tool_mode=settings.LLM_TOOL_MODE,
            max_tokens=settings.LLM_MAX_TOKENS,
            grammar_safe_schemas=grammar_safe_schemas(),
        )
    from feedback.agent.offline import OfflineDemoModel

    return OfflineDemoModel()


def apply_tool_mode(model: ChatModel, choose: Callable[[str], str]) -> None:
    """Let a run's strategies choose how its endpoint is asked for tool calls (``choose`` maps the
    configured mode to the run's: guardrails.tool_mode). Models without modes ignore it."""
    from .adapter import EndpointModel

    if isinstance(model, EndpointModel):
        model.tool_mode = choose(model.tool_mode)


def describe_backend() -> str:
    """How the UI names the model in use; the offline one is never passed off as an LLM."""
    if use_endpoint():
        return f"{settings.LLM_MODEL} at {settings.OPENAI_BASE_URL or 'the OpenAI API'}"
    return "Offline demo model (rule-based, no LLM)"
