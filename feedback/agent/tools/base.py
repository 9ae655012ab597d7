from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class ToolError(Exception):
    """A failure a tool reports. ``retryable`` errors are transient: worth another attempt.
    ``error_class`` is what the step records (error signatures, reflection and mining read it)."""

    error_class = "ToolError"

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


class ToolTimeout(ToolError):
    """A tool that reports it waited past its timeout itself (an MCP server that did not start or
    answer in time): recorded as the invoker records a built-in that ran past its own."""

    error_class = "ToolTimeout"

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        super().__init__(message, retryable=retryable)


@dataclass(frozen=True)
class ToolContext:
    run_id: int
    workspace: Path


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    func: Callable[..., Any]
    idempotent: bool = True
    sensitive: bool = False
    timeout: float = 10.0
    max_attempts: int = 3
    # Seconds an idempotent tool's result is reused for the same arguments (0: never).
    cache_ttl: int = 0
    # The result depends on the arguments alone, not on the run's sandbox: its cached or last
    # good result may serve any run. Otherwise (the safe default) only the runs of that sandbox.
    workspace_independent: bool = False
    # A tool to call instead while this one's circuit breaker is open.
    fallback: str = ""
    # Layer-1 rules its results must pass (see feedback.evaluation.validation).
    result_rules: tuple[dict[str, Any], ...] = field(default=())
    # Handled by the engine itself rather than run in the tool pool (plan, sub-agents).
    engine: bool = False

    def spec(self) -> dict[str, Any]:
        """The OpenAI function-calling description of this tool."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }
