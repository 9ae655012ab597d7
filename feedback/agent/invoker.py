"""Calls one tool safely: arguments parsed strictly and validated against the tool's JSON
Schema, a timeout, retries of transient errors only, every attempt kept. Nothing raised here
reaches the loop: every failure becomes an outcome the model can read."""

import json
import random
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import jsonschema
from django.utils import timezone

from .tools import Tool, ToolContext, ToolError

MAX_ATTEMPTS = 3
BACKOFF_BASE_SECONDS = 0.2
_POOL = ThreadPoolExecutor(max_workers=16, thread_name_prefix="tool")


@dataclass
class Attempt:
    number: int
    started_at: datetime
    duration_ms: int
    error: str = ""
    error_class: str = ""
    retryable: bool = False


@dataclass
class Outcome:
    arguments: Any
    ok: bool = False
    result: Any = None
    error: str = ""
    error_class: str = ""
    started_at: datetime = field(default_factory=timezone.now)
    finished_at: datetime | None = None
    attempts: list[Attempt] = field(default_factory=list)

    def observation(self) -> str:
        """The text the model reads back as the tool's answer."""
        if self.ok:
            return json.dumps({"ok": True, "result": self.result}, ensure_ascii=False)
        return json.dumps({"ok": False, "error": self.error}, ensure_ascii=False)


def parse_arguments(raw: str, tool: Tool) -> dict[str, Any]:
    try:
        arguments = json.loads(raw or "{}")
    except json.JSONDecodeError as exc:
        raise ToolError(f"The arguments are not valid JSON ({exc.msg} at position {exc.pos}).") from exc
    if not isinstance(arguments, dict):
        raise ToolError("The arguments must be a JSON object.")
    try:
        jsonschema.validate(arguments, tool.parameters)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "arguments"
        raise ToolError(f"Invalid arguments for {tool.name} ({where}): {exc.message}") from exc
    return arguments


def _backoff(attempt: int) -> float:
    # Exponential with full jitter, so many workers retrying do not stampede together.
    return random.uniform(0, BACKOFF_BASE_SECONDS * 2 ** (attempt - 1))


def invoke(
    tool: Tool | None, name: str, raw_arguments: str, ctx: ToolContext, available: list[str]
) -> Outcome:
    try:
        recorded: Any = json.loads(raw_arguments or "{}")
    except json.JSONDecodeError:
        recorded = raw_arguments
    outcome = Outcome(arguments=recorded)
    try:
        if tool is None:
            raise ToolError(f"Unknown tool {name!r}. Available tools: {', '.join(sorted(available))}.")
        arguments = parse_arguments(raw_arguments, tool)
    except ToolError as exc:
        outcome.error, outcome.error_class = str(exc), "InvalidToolCall"
        outcome.finished_at = timezone.now()
        return outcome

    for number in range(1, MAX_ATTEMPTS + 1):
        started, t0 = timezone.now(), time.monotonic()
        error, error_class, retryable = "", "", False
        try:
            future = _POOL.submit(tool.func, ctx, **arguments)
            result = future.result(timeout=tool.timeout)
        except FutureTimeout:
            error, error_class, retryable = f"{name} timed out after {tool.timeout:g} s.", "ToolTimeout", True
        except ToolError as exc:
            error, error_class, retryable = str(exc), "ToolError", exc.retryable
        except Exception as exc:  # a tool bug must not crash the loop
            error, error_class = f"{type(exc).__name__}: {exc}", type(exc).__name__
        duration = int((time.monotonic() - t0) * 1000)
        outcome.attempts.append(Attempt(number, started, duration, error, error_class, retryable))
        if not error:
            outcome.ok, outcome.result = True, result
            break
        outcome.error, outcome.error_class = error, error_class
        if not retryable or number == MAX_ATTEMPTS:
            break
        time.sleep(_backoff(number))
    outcome.finished_at = timezone.now()
    return outcome
