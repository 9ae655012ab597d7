"""MCP servers' tools in the registry: one Tool per exposed tool, named ``<server>__<tool>``.

A server's tool listing is kept on its row (``McpServer.tool_listing``), listed when an operator
saves or tests it in the admin and by beat's refresh (``mcp_listings_refresh``: a server never
listed, or whose listing is older than ``MCP_TOOLS_REFRESH_SECONDS``). A run's tools come from the
stored listings alone: starting a run never waits for a server, so one that hangs or is down costs
nothing to a run that does not call it. Its tools stay offered; calling one connects then (with
the server's timeout), and a server that does not answer in time is a ToolTimeout step.

Each tool keeps the server's JSON Schema for its parameters (the invoker validates arguments
against it before any call), goes through the invoker like a built-in (timeout, a circuit
breaker of its own name, retries of transient errors, layer-1 rules, masking of what is stored)
and through the loop's confirmation when an operator marked it sensitive. A failed call that may
have reached the server is retried only when the server says the tool is read-only or
idempotent: another attempt of anything else could do it twice.

The run's workspace: an MCP tool is not a file tool, and nothing of the sandbox's guarantee
applies to it. A stdio server starts with the run's sandbox as its working directory (so a
server that works on "the current directory" works on the run's own copy of the files, as the
built-ins do, and nothing of another run's), but it is a process of the operator's choosing with
the worker's rights, not confined to it; an HTTP server is sent nothing of the workspace.
"""

import dataclasses
import hashlib
import json
import logging
import re
import sys
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import jsonschema
from django.conf import settings
from django.core.cache import cache
from django.db.models import Q
from django.utils import timezone

from feedback.models import McpServer

from .base import Tool, ToolContext, ToolError, ToolTimeout

logger = logging.getLogger(__name__)

SEPARATOR = "__"
# What OpenAI-compatible endpoints accept as a function name.
_FUNCTION_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
MAX_TEXT = 100_000
MAX_ERROR = 2_000
# Beyond the server's two timeouts (connecting, the call): the invoker's own bound is a safety
# net only, the bridge reports first.
_INVOKER_GRACE = 10.0
# How long a server whose listing failed waits before the refresh asks it again.
_FAILED_LISTING_PAUSE = 300


def exposed_name(server: str, tool: str) -> str:
    return f"{server}{SEPARATOR}{tool}"


@dataclass(frozen=True)
class ListedTool:
    """One tool of a server's listing, as the admin shows it."""

    tool: str
    name: str  # as offered to the model
    description: str
    offered: bool
    note: str  # why it is not offered, or what is special about it
    sensitive: bool = False
    read_only: bool = False


def _bridge():
    # The SDK takes about a second to import: only processes that talk to a server pay it.
    from feedback.agent import mcp

    return mcp


def spec_of(server: McpServer):
    return _bridge().ServerSpec(
        name=server.name,
        transport=server.transport,
        command=server.command,
        args=tuple(server.args),
        env=tuple(sorted(server.env.items())),
        url=server.url,
        headers=tuple(sorted(server.headers.items())),
        timeout=server.timeout_seconds,
    )


def _unusable(server_name: str, entry: dict) -> str:
    """Why a listed tool cannot be offered, or ""."""
    name = exposed_name(server_name, entry["name"])
    if not _FUNCTION_NAME.match(name):
        return f"{name!r} is not a usable function name (letters, digits, _ and -, at most 64)."
    schema = entry.get("input_schema")
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return "its parameters' schema is not a JSON Schema object."
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        return f"its parameters' schema is invalid: {exc.message}"
    return ""


def listing_entry(tool: Any) -> dict[str, Any]:
    """What is kept of an SDK ``Tool`` on the server's row."""
    hints = tool.annotations
    return {
        "name": tool.name,
        "description": tool.description or "",
        "input_schema": tool.input_schema,
        "read_only": bool(hints and hints.read_only_hint),
        "idempotent": bool(hints and (hints.read_only_hint or hints.idempotent_hint)),
    }


def list_and_store(server: McpServer, *, timeout: float | None = None) -> list[dict[str, Any]]:
    """Ask the server for its tools and keep the listing; on failure keep the last one, record
    the error and raise it (a ToolError saying what went wrong). ``timeout``: at most this long
    to start or reach the server and for each answer, if shorter than the server's own."""
    bridge = _bridge()
    spec = spec_of(server)
    if timeout is not None and timeout < spec.timeout:
        spec = dataclasses.replace(spec, timeout=timeout)
    try:
        tools = bridge.list_tools(spec)
    except bridge.McpFailure as exc:
        McpServer.objects.filter(pk=server.pk).update(list_error=str(exc))
        server.list_error = str(exc)
        failure = ToolTimeout if exc.timed_out else ToolError
        raise failure(str(exc), retryable=exc.transient) from None
    server.tool_listing = [listing_entry(t) for t in tools]
    server.listed_at, server.list_error = timezone.now(), ""
    McpServer.objects.filter(pk=server.pk).update(
        tool_listing=server.tool_listing, listed_at=server.listed_at, list_error=""
    )
    return server.tool_listing


def listed_tools(server: McpServer) -> list[ListedTool]:
    """The server's stored listing, each tool with whether it is offered and why not."""
    overrides = {o.tool: o for o in server.overrides.all()}
    rows = []
    for entry in server.tool_listing:
        override = overrides.get(entry["name"])
        note = _unusable(server.name, entry)
        if not note and server.expose and entry["name"] not in server.expose:
            note = "not in the tools to expose."
        if not note and override is not None and not override.enabled:
            note = "disabled by an override."
        rows.append(
            ListedTool(
                tool=entry["name"],
                name=exposed_name(server.name, entry["name"]),
                description=entry.get("description", ""),
                offered=not note,
                note=note,
                sensitive=bool(override and override.sensitive),
                read_only=entry.get("read_only", False),
            )
        )
    return rows


def _text(result: Any) -> str:
    return "\n".join(block.text for block in result.content if block.type == "text")


def _json_object(text: str) -> dict | None:
    try:
        value = json.loads(text, parse_constant=lambda name: {}[name])  # no NaN: jsonb refuses it
    except (ValueError, KeyError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def as_result(result: Any) -> dict[str, Any]:
    """A CallToolResult as the step records it: its structured content when it has some; a text
    that is one JSON object as that object (servers often answer JSON as text: layer-1 rules can
    then check its keys); otherwise its text (bounded) and a summary of any other content."""
    if result.structured_content is not None:
        content = result.structured_content
        return content if isinstance(content, dict) else {"result": content}
    text = _text(result)
    if len(result.content) == 1 and len(text) <= MAX_TEXT and (value := _json_object(text)) is not None:
        return value
    out: dict[str, Any] = {"text": text[:MAX_TEXT]}
    if len(text) > MAX_TEXT:
        out["truncated"] = True
    others = [_summary(block) for block in result.content if block.type != "text"]
    if others:
        out["content"] = others
    return out


def _summary(block: Any) -> dict[str, Any]:
    if block.type in ("image", "audio"):
        return {"type": block.type, "mime_type": block.mime_type, "bytes": len(block.data) * 3 // 4}
    if block.type == "resource_link":
        return {"type": block.type, "uri": str(block.uri), "name": block.name}
    resource = getattr(block, "resource", None)
    text = getattr(resource, "text", None)
    return {"type": block.type, "uri": str(getattr(resource, "uri", "")), **({"text": text[:MAX_TEXT]} if text else {})}


def _caller(server: McpServer, spec: Any, remote: str, *, idempotent: bool, timeout: float):
    stdio = server.transport == McpServer.Transport.STDIO
    where = f"{remote} on MCP server {server.name!r}"

    def call(ctx: ToolContext, /, **arguments: Any) -> dict[str, Any]:
        bridge = _bridge()
        try:
            result = bridge.call_tool(
                spec,
                run_id=ctx.run_id,
                cwd=ctx.workspace if stdio else None,
                tool=remote,
                arguments=arguments,
                timeout=timeout,
            )
        except bridge.McpFailure as exc:
            # A call that may have run is tried again only if running it twice does no harm. A
            # server that did not start, connect or answer in time is a ToolTimeout, as a
            # built-in past its timeout is: one error class for signatures, retries and metrics.
            failure = ToolTimeout if exc.timed_out else ToolError
            raise failure(str(exc), retryable=exc.transient and (idempotent or not exc.sent)) from None
        if result.is_error:
            said = _text(result).strip() or "no message"
            raise ToolError(f"{where} reported an error: {said[:MAX_ERROR]}")
        return as_result(result)

    return call


def server_tools(server: McpServer) -> dict[str, Tool]:
    """The server's offered tools as registry entries (built once per listing and settings, so
    their schemas stay the same objects and the invoker's validators are reused)."""
    overrides = {o.tool: o for o in server.overrides.all()}
    key = _fingerprint(server, overrides)
    built = _BUILT.get(key)
    if built is not None:
        return built
    spec = spec_of(server)
    entries = {entry["name"]: entry for entry in server.tool_listing}
    tools = {}
    for row in listed_tools(server):
        if not row.offered:
            continue
        entry, override = entries[row.tool], overrides.get(row.tool)
        timeout = (override.timeout_seconds if override else None) or server.timeout_seconds
        idempotent = bool(entry.get("idempotent"))
        tools[row.name] = Tool(
            name=row.name,
            description=(entry.get("description") or row.tool)[:1024],
            parameters=entry["input_schema"],
            func=_caller(server, spec, row.tool, idempotent=idempotent, timeout=timeout),
            idempotent=idempotent,
            sensitive=row.sensitive,
            timeout=server.timeout_seconds + timeout + _INVOKER_GRACE,
            result_rules=tuple(override.result_rules) if override else (),
        )
    if len(_BUILT) > 256:
        _BUILT.clear()
    _BUILT[key] = tools
    return tools


_BUILT: dict[str, dict[str, Tool]] = {}


def _fingerprint(server: McpServer, overrides: dict) -> str:
    settings_ = [
        (o.tool, o.enabled, o.sensitive, o.timeout_seconds, o.result_rules) for _, o in sorted(overrides.items())
    ]
    described = [
        server.pk, server.name, server.transport, server.command, server.args, server.env, server.url,
        server.headers, server.timeout_seconds, server.expose, server.tool_listing, settings_,
    ]  # fmt: skip
    return hashlib.sha1(json.dumps(described, sort_keys=True, default=str).encode()).hexdigest()


def mcp_listings_refresh() -> int:
    """List again every enabled server never listed, or whose listing is older than
    ``MCP_TOOLS_REFRESH_SECONDS`` (0: never listed only); beat's job, never a run's. A server that
    fails keeps its last listing, with the error beside it. Returns how many were listed."""
    stale = Q(listed_at__isnull=True)
    if every := settings.MCP_TOOLS_REFRESH_SECONDS:
        stale |= Q(listed_at__lt=timezone.now() - timedelta(seconds=every))
    listed = 0
    for server in McpServer.objects.filter(stale, enabled=True):
        # One worker lists a server at a time (a slow beat tick overlapping the next one).
        key = f"mcp-listing:{server.pk}"
        if not cache.add(key, 1, timeout=int(server.timeout_seconds * 2) + 30):
            continue
        try:
            list_and_store(server)
            listed += 1
        except ToolError as exc:
            logger.warning("listing the tools of MCP server %s failed; keeping the last listing: %s", server.name, exc)
            # Not asked again at every tick: a server that hangs would hold a worker thread for
            # its timeout each minute.
            cache.set(key, 1, timeout=_FAILED_LISTING_PAUSE)
        else:
            cache.delete(key)
    return listed


def mcp_tools() -> dict[str, Tool]:
    """Every enabled server's offered tools, from the listings stored on their rows: no server is
    asked anything here (see mcp_listings_refresh)."""
    tools: dict[str, Tool] = {}
    for server in McpServer.objects.filter(enabled=True).prefetch_related("overrides"):
        try:
            tools.update(server_tools(server))
        except Exception:  # one server's bad row (saved around the admin's checks) stops no run
            logger.exception("the tools of MCP server %s are left out", server.name)
    return tools


def release_run(run_id: int) -> None:
    """End the run's MCP sessions (stdio: stop their processes). A process that never loaded the
    client has none."""
    bridge = sys.modules.get("feedback.agent.mcp")
    if bridge is not None:
        bridge.release(run_id)
