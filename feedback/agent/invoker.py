"""Calls one tool safely: arguments parsed strictly and validated against the tool's JSON
Schema, a cached result for idempotent tools, a circuit breaker shared by every worker, a
timeout, retries of transient errors only with every attempt kept, and degradation (a fallback
tool, or the last good result marked stale) while the breaker is open. Nothing raised here
reaches the loop: every failure becomes an outcome the model can read."""

import contextvars
import hashlib
import json
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import jsonschema
import referencing.exceptions
from django.conf import settings
from django.core.cache import cache
from django.utils import timezone
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt

from feedback import saferegex
from feedback.evaluation.validation import validate
from feedback.privacy import mask, unmask_emails
from feedback.retrying import full_jitter

from .breaker import CircuitBreaker
from .tools import Tool, ToolContext, ToolError

STALE_RESULT_SECONDS = 24 * 3600
_POOL = ThreadPoolExecutor(max_workers=32, thread_name_prefix="tool")


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
    retryable: bool = False
    cached: bool = False
    stale: bool = False
    served_by: str = ""
    # Layer-1 report on the result: {"status": "pass"|"fail", "checks": [...]}, or None.
    validation: dict | None = None
    started_at: datetime = field(default_factory=timezone.now)
    finished_at: datetime | None = None
    attempts: list[Attempt] = field(default_factory=list)


# Model output is hostile until proven otherwise: bounded in size, strict JSON only.
MAX_ARGUMENTS_CHARS = 200_000


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"{text} is too large a number")
    return value


# Built once: json.loads with these hooks builds a new decoder at every call.
_STRICT_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)


def strict_json(raw: str) -> Any:
    """json.loads without NaN, Infinity or overflowing numbers (PostgreSQL's jsonb refuses them),
    within a size bound, and without the RecursionError of absurdly deep nesting."""
    if len(raw) > MAX_ARGUMENTS_CHARS:
        raise ValueError(f"longer than {MAX_ARGUMENTS_CHARS} characters")
    try:
        return _STRICT_DECODER.decode(raw)
    except RecursionError:
        raise ValueError("nested too deeply") from None


_VALIDATORS: dict[int, tuple[dict, Any]] = {}


def _validator(schema: dict) -> Any:
    """A checked validator per schema, built once: ``jsonschema.validate`` re-checks the schema
    itself on every call, which cost more than the rest of a zero-latency step. Its patterns run
    on RE2: an MCP server's schema is outside input, and the arguments are the model's."""
    cached = _VALIDATORS.get(id(schema))
    if cached is None or cached[0] is not schema:  # the identity check guards against id reuse
        cached = _VALIDATORS[id(schema)] = (schema, saferegex.schema_validator(schema))
    return cached[1]


def parse_arguments(raw: str, tool: Tool) -> dict[str, Any]:
    if not isinstance(raw, str):
        raise ToolError("The arguments must be a JSON object in a string.")
    try:
        arguments = strict_json(raw or "{}")
    except json.JSONDecodeError as exc:
        raise ToolError(f"The arguments are not valid JSON ({exc.msg} at position {exc.pos}).") from exc
    except ValueError as exc:
        raise ToolError(f"The arguments are not valid JSON ({exc}).") from exc
    if not isinstance(arguments, dict):
        raise ToolError("The arguments must be a JSON object.")
    try:
        _validator(tool.parameters).validate(arguments)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "arguments"
        raise ToolError(f"Invalid arguments for {tool.name} ({where}): {exc.message}") from exc
    except (jsonschema.SchemaError, referencing.exceptions.Unresolvable) as exc:
        # A schema from outside (an MCP server's) that cannot be used: the call fails, not the run.
        raise ToolError(f"The parameters' schema of {tool.name} cannot be used: {exc}") from exc
    return arguments


def _cache_key(kind: str, tool: Tool, arguments: dict[str, Any], ctx: ToolContext) -> str:
    # A result read from the run's files serves only that sandbox (the run and its sub-agents):
    # another run may hold other content, someone else's, at the same path.
    scope = "" if tool.workspace_independent else str(ctx.workspace)
    digest = hashlib.sha1(json.dumps([scope, arguments], sort_keys=True).encode()).hexdigest()
    return f"tool-{kind}:{tool.name}:{digest}"


def _unrecordable(tool: Tool, result: Any) -> str:
    """Why ``result`` cannot be recorded as JSON (an int of 5,000 digits, a set, an object), or "".
    Found here, it is the model's observation; found by the recorder, it would end the run."""
    try:
        json.dumps(result)
    except (ValueError, TypeError, RecursionError) as exc:
        return f"{tool.name} returned a result that cannot be recorded ({type(exc).__name__}: {str(exc)[:200]})."
    return ""


class _AttemptFailed(Exception):
    """One attempt's failure, already recorded: raised so that tenacity decides on another."""

    def __init__(self, attempt: Attempt) -> None:
        super().__init__(attempt.error)
        self.attempt = attempt


def _transient(exc: BaseException) -> bool:
    return isinstance(exc, _AttemptFailed) and exc.attempt.retryable


def _attempt(tool: Tool, arguments: dict[str, Any], ctx: ToolContext, outcome: Outcome) -> Any:
    """One call of the tool, its attempt row kept on ``outcome``; its result, or _AttemptFailed."""
    started, t0 = timezone.now(), time.monotonic()
    error, error_class, retryable, result = "", "", False, None
    try:
        # copy_context: the tool thread logs with the run's ids.
        future = _POOL.submit(contextvars.copy_context().run, tool.func, ctx, **arguments)
        result = future.result(timeout=tool.timeout)
    except FutureTimeout:
        error, error_class, retryable = f"{tool.name} timed out after {tool.timeout:g} s.", "ToolTimeout", True
    except ToolError as exc:  # ToolTimeout included, under its own class
        error, error_class, retryable = str(exc), exc.error_class, exc.retryable
    except Exception as exc:  # a tool bug must not crash the loop
        error, error_class = f"{type(exc).__name__}: {exc}", type(exc).__name__
    if not error and (unrecordable := _unrecordable(tool, result)):
        error, error_class = unrecordable, "UnrecordableResult"
    if not error and tool.result_rules:
        # Layer 1: a result that breaks a hard rule is a failed attempt, retried if transient.
        report = validate(list(tool.result_rules), result)
        outcome.validation = report.as_json()
        if report.hard_failure:
            failed = "; ".join(c["message"] for c in report.checks if not c["ok"] and c["hard"])
            error, error_class = f"The result failed validation: {failed}", "ValidationFailed"
            retryable = report.retryable
    duration = int((time.monotonic() - t0) * 1000)
    attempt = Attempt(len(outcome.attempts) + 1, started, duration, error, error_class, retryable)
    outcome.attempts.append(attempt)
    if error:
        outcome.error, outcome.error_class, outcome.retryable = error, error_class, retryable
        raise _AttemptFailed(attempt)
    return result


def _call_with_retries(
    tool: Tool, arguments: dict[str, Any], ctx: ToolContext, outcome: Outcome, breaker: CircuitBreaker, dirty: bool
) -> None:
    """The tool called until it succeeds, fails for good, runs out of attempts or its breaker
    opens (feedback/retrying.py's policy, with full jitter: many workers share one breaker).

    ``dirty``: the breaker had failures to reset when it was read before the call. A failure
    another worker records during this call is kept when the read was clean: this success then
    counts as having come before it, as if the calls had not overlapped."""

    def counted(state: RetryCallState) -> None:
        # After each transient failure, before tenacity decides whether to stop: the breaker
        # counts it, and may open.
        nonlocal dirty
        breaker.record_failure()
        dirty = True

    retrying = Retrying(
        retry=retry_if_exception(_transient),
        stop=stop_after_attempt(tool.max_attempts) | (lambda state: breaker.is_open()),
        wait=full_jitter(settings.TOOL_BACKOFF_SECONDS),
        after=counted,
        reraise=True,
    )
    try:
        result = retrying(_attempt, tool, arguments, ctx, outcome)
    except _AttemptFailed:
        return  # recorded on the outcome: the model reads it as the call's observation
    if dirty:
        breaker.record_success()
    outcome.ok, outcome.result, outcome.error, outcome.error_class = True, result, "", ""


def _recorded(raw_arguments: str) -> Any:
    """The arguments as a step records them: parsed when they are JSON, else as the model wrote them."""
    try:
        return strict_json(raw_arguments or "{}")
    except (ValueError, TypeError):
        return raw_arguments if isinstance(raw_arguments, str) else repr(raw_arguments)


def refused(raw_arguments: str, message: str, error_class: str) -> Outcome:
    """The outcome of a call that was never made: a guardrail or a person refused it."""
    return Outcome(
        arguments=_recorded(raw_arguments), error=message, error_class=error_class, finished_at=timezone.now()
    )


def invoke(name: str, raw_arguments: str, ctx: ToolContext, tools: dict[str, Tool]) -> Outcome:
    outcome = Outcome(arguments=_recorded(raw_arguments))
    # The stored history holds email pseudonyms; the tool gets the real address (see privacy).
    raw_arguments = unmask_emails(raw_arguments, ctx.workspace) if isinstance(raw_arguments, str) else raw_arguments
    tool = tools.get(name)
    try:
        if tool is None:
            raise ToolError(f"Unknown tool {name!r}. Available tools: {', '.join(sorted(tools))}.")
        arguments = parse_arguments(raw_arguments, tool)
    except ToolError as exc:
        outcome.error, outcome.error_class = str(exc), "InvalidToolCall"
        outcome.finished_at = timezone.now()
        return outcome

    if tool.idempotent and tool.cache_ttl:
        hit = cache.get(_cache_key("result", tool, arguments, ctx))
        if hit is not None:
            outcome.ok, outcome.result, outcome.cached = True, hit, True
            outcome.finished_at = timezone.now()
            return outcome

    breaker = CircuitBreaker(tool.name)
    seen = breaker.read()
    if seen.open:
        _degrade(tool, arguments, raw_arguments, ctx, tools, outcome)
    else:
        _call_with_retries(tool, arguments, ctx, outcome, breaker, seen.dirty)
        if outcome.ok and tool.idempotent:
            # Kept as the step stores it (masked): the model reads the stored step either way.
            kept = mask(outcome.result)
            if tool.cache_ttl:
                cache.set(_cache_key("result", tool, arguments, ctx), kept, tool.cache_ttl)
            cache.set(_cache_key("last", tool, arguments, ctx), kept, STALE_RESULT_SECONDS)
    outcome.finished_at = timezone.now()
    return outcome


def _degrade(
    tool: Tool,
    arguments: dict,
    raw_arguments: str,
    ctx: ToolContext,
    tools: dict[str, Tool],
    outcome: Outcome,
) -> None:
    fallback = tools.get(tool.fallback) if tool.fallback else None
    if fallback is not None and CircuitBreaker(fallback.name).allow():
        replacement = invoke(fallback.name, raw_arguments, ctx, {k: v for k, v in tools.items() if k != tool.name})
        outcome.__dict__.update({k: v for k, v in replacement.__dict__.items() if k != "arguments"})
        outcome.served_by = fallback.name
        return
    last = cache.get(_cache_key("last", tool, arguments, ctx)) if tool.idempotent else None
    if last is not None:
        outcome.ok, outcome.result, outcome.stale, outcome.served_by = True, last, True, "stale cache"
        return
    outcome.error = (
        f"{tool.name} is unavailable: its circuit breaker is open after repeated failures. "
        "Try another approach or try again later."
    )
    outcome.error_class = "CircuitOpen"
