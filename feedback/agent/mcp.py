"""Calls to MCP servers (the official ``mcp`` SDK) from the worker's threads.

**One event loop per process, in a thread of its own.** The SDK is asyncio-based (anyio) and the
worker runs the loop in threads (``--pool threads``), each tool call in an invoker pool thread.
Those threads never run a loop: they hand coroutines to the MCP thread's loop
(``run_coroutine_threadsafe``) and wait for the answer, so no "event loop already running"
whatever thread calls, and each session (whose anyio scopes must be entered and left by one task)
is owned by one task on that loop for its whole life.

**Sessions last one run's execution.** A run's first call to a server starts a session: for
stdio, the command as a process of its own, in the run's sandbox as working directory, with
only the variables the operator gave (plus PATH, HOME, USER, SHELL, TERM, LOGNAME: never the
worker's secrets); for HTTP, a connection and an MCP session. The run's later calls (and
several at once) reuse it. ``release(run_id)``, when the run's execution ends in any way (an
answer, a failure, a pause for a confirmation, a crash), closes it; closing a stdio session
closes the process's stdin, then SIGTERMs, then SIGKILLs its process group (the SDK's shutdown,
each step bounded), and the SDK reaps it: no process outlives the run, no zombie is left. A
session found dead before a call (its process exited, the connection dropped) is replaced; one
whose call timed out is closed at once, since a server that hangs may be wedged. At the
process's exit every session is closed.

Why not a process per call: a Python server takes a second or more to start, every call would
pay it. Why not one pool per worker process shared by runs: a server's working directory and
whatever state it keeps would be shared between runs (other people's files), and one wedged
server would hold up every run. Per run, neither.

Failures are ``McpFailure``: a message a model can read, whether it is transient, and whether the
request may have reached the server (a call that may have run is retried only when the tool says
it is read-only or idempotent; see ``feedback.agent.tools.mcp``).
"""

import asyncio
import atexit
import logging
import os
import tempfile
import threading
from collections.abc import Coroutine
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types
import pydantic
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

logger = logging.getLogger(__name__)

# Beyond an operation's own timeout, how long a thread waits for the loop to report it: only a
# loop that stopped answering (a bug) would use it.
_GRACE_SECONDS = 5.0
# The SDK's stdio shutdown takes at most about 6 s (stdin closed 2 s, SIGTERM 2 s, SIGKILL 2 s).
_CLOSE_SECONDS = 10.0
_STDERR_TAIL = 600
_LIST_PAGES = 20


@dataclass(frozen=True)
class ServerSpec:
    """How to reach one server; equal specs share a run's session (an edit starts a new one)."""

    name: str
    transport: str  # "stdio" or "http"
    command: str = ""
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    url: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    timeout: float = 30.0


class McpFailure(Exception):
    """A call or a connection that failed. ``transient``: worth another attempt; ``sent``: the
    request may have reached the server (so another attempt could run it twice); ``timed_out``:
    it was given up on at its timeout (the step records a ToolTimeout, as for a built-in)."""

    def __init__(self, message: str, *, transient: bool, sent: bool, timed_out: bool = False) -> None:
        super().__init__(message)
        self.transient = transient
        self.sent = sent
        self.timed_out = timed_out


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _cause(exc: BaseException) -> BaseException:
    """The exception that says what happened: task groups wrap it, cancellations follow it."""
    leaves = [e for e in _leaves(exc) if not isinstance(e, asyncio.CancelledError)] or [exc]
    return leaves[0]


class _Session:
    """One connection to one server, owned by one task on the MCP loop."""

    def __init__(self, spec: ServerSpec, cwd: Path | None) -> None:
        self.spec = spec
        self.cwd = cwd
        self.client: Client | None = None
        self.error: BaseException | None = None
        self.http_status: int | None = None
        self.ready = asyncio.Event()
        self.closing = asyncio.Event()
        self.dead = asyncio.Event()
        # A stdio server's stderr, for the error message if it dies; closed when the session ends.
        stdio = spec.transport == "stdio"
        self._stderr = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") if stdio else None  # noqa: SIM115
        self.stderr_tail = ""
        # Cancelled by close() while the server is still starting (see there).
        self._starting = anyio.CancelScope()
        self.task = asyncio.get_running_loop().create_task(self._own(), name=f"mcp-{spec.name}")

    async def _own(self) -> None:
        try:
            with self._starting:
                async with AsyncExitStack() as stack:
                    if self.spec.transport == "stdio":
                        params = StdioServerParameters(
                            command=self.spec.command, args=list(self.spec.args), env=dict(self.spec.env), cwd=self.cwd
                        )
                        transport = stdio_client(params, errlog=self._stderr)
                    else:
                        http = await stack.enter_async_context(
                            httpx2.AsyncClient(
                                headers=dict(self.spec.headers),
                                timeout=httpx2.Timeout(self.spec.timeout, read=300.0),
                                event_hooks={"response": [self._saw_response]},
                            )
                        )
                        transport = streamable_http_client(self.spec.url, http_client=http)
                    self.client = await stack.enter_async_context(Client(transport, cache=None))
                    self.ready.set()
                    await self.closing.wait()
        except BaseException as exc:  # every way a session ends is reported to its callers
            self.error = exc
            task = asyncio.current_task()
            if isinstance(exc, asyncio.CancelledError) and task is not None and task.cancelling():
                raise
        finally:
            self.client = None
            if self._stderr is not None:
                self._stderr.seek(0)
                self.stderr_tail = self._stderr.read()[-_STDERR_TAIL:].strip()
                self._stderr.close()
            self.ready.set()
            self.dead.set()

    async def _saw_response(self, response: httpx2.Response) -> None:
        self.http_status = response.status_code

    @property
    def usable(self) -> bool:
        if self.dead.is_set() or self.closing.is_set():
            return False
        # A server that exited between calls: the SDK's dispatcher has seen its end of stream and
        # would refuse the call unsent. Checked so a call is not reported as possibly run.
        dispatcher = getattr(getattr(self.client, "_session", None), "_dispatcher", None)
        return not getattr(dispatcher, "_closed", False)

    async def close(self) -> None:
        self.closing.set()
        if not self.ready.is_set():
            # Still starting (a server that hangs before it answers "initialize" never reaches the
            # wait for ``closing``): its start is cancelled, an anyio cancellation the SDK's
            # shielded shutdown of the process runs under, rather than waiting out _CLOSE_SECONDS.
            self._starting.cancel()
        try:
            await asyncio.wait_for(self.dead.wait(), _CLOSE_SECONDS)
        except TimeoutError:
            logger.error("MCP server %s did not close within %s s; cancelling it", self.spec.name, _CLOSE_SECONDS)
            self.task.cancel()

    def describe(self, exc: BaseException | None, doing: str) -> McpFailure:
        """What went wrong, for the model and the operator."""
        cause = _cause(exc) if exc is not None else None
        where = f"MCP server {self.spec.name!r}"
        sent = doing == "call"
        status = self.http_status
        if isinstance(cause, FileNotFoundError | PermissionError):
            started = f"{where} could not be started ({self.spec.command!r}: {cause.strerror})."
            return McpFailure(started, transient=False, sent=False)
        if isinstance(cause, httpx2.ConnectTimeout):
            unanswered = f"{where} did not accept a connection at {self.spec.url} within {self.spec.timeout:g} s."
            return McpFailure(unanswered, transient=True, sent=False, timed_out=True)
        if isinstance(cause, httpx2.ConnectError):
            return McpFailure(f"{where} is unreachable at {self.spec.url}: {cause}.", transient=True, sent=False)
        if isinstance(cause, pydantic.ValidationError):
            first = cause.errors()[0] if cause.errors() else {"loc": (), "msg": str(cause)}
            at = ".".join(str(p) for p in first["loc"]) or "reply"
            detail = f"{at}: {first['msg']}"
            return McpFailure(f"{where} sent a malformed reply ({detail}).", transient=False, sent=sent)
        if status is not None and status >= 400:
            transient = status == 429 or status >= 500
            return McpFailure(f"{where} answered HTTP {status} at {self.spec.url}.", transient=transient, sent=sent)
        timed_out = isinstance(cause, MCPError) and cause.error.code == mcp_types.REQUEST_TIMEOUT
        if timed_out or isinstance(cause, TimeoutError | httpx2.TimeoutException):  # one is a TransportError
            return McpFailure(f"{where} timed out.", transient=True, sent=sent, timed_out=True)
        closed = isinstance(cause, MCPError) and cause.error.code == mcp_types.CONNECTION_CLOSED
        if closed or isinstance(cause, httpx2.TransportError) or cause is None:
            said = f" Its last output: {self.stderr_tail}" if self.stderr_tail else ""
            ended = "exited or closed the connection" + (" during the call." if sent else " while starting.")
            return McpFailure(f"{where} {ended}{said}", transient=True, sent=sent)
        if isinstance(cause, MCPError):
            refused = f"{where} refused the request: {cause.error.message} (error {cause.error.code})."
            return McpFailure(refused, transient=False, sent=sent)
        return McpFailure(f"{where} failed: {type(cause).__name__}: {cause}", transient=False, sent=sent)

    async def connected(self) -> Client:
        try:
            await asyncio.wait_for(self.ready.wait(), self.spec.timeout)
        except TimeoutError:
            self.closing.set()  # the bridge stops it in the background
            raise McpFailure(
                f"MCP server {self.spec.name!r} did not start or connect within {self.spec.timeout:g} s.",
                transient=True,
                sent=False,
                timed_out=True,
            ) from None
        if self.client is None:
            raise self.describe(self.error, "connect")
        return self.client

    async def call(self, tool: str, arguments: dict[str, Any], timeout: float) -> mcp_types.CallToolResult:
        client = await self.connected()
        self.http_status = None  # what this call's requests answer, not an earlier one's
        call = asyncio.ensure_future(client.call_tool(tool, arguments))
        ended = asyncio.ensure_future(self.dead.wait())
        done, _ = await asyncio.wait({call, ended}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        ended.cancel()
        if call in done and not call.cancelled():
            try:
                return call.result()
            except Exception as exc:
                failure = self.describe(exc, "call")
                if failure.transient:
                    self.closing.set()
                raise failure from None
        call.cancel()
        if call in done or ended in done:  # the session ended under the call
            self.closing.set()
            await asyncio.wait({self.task}, timeout=_CLOSE_SECONDS)
            raise self.describe(self.error, "call")
        self.closing.set()  # a server that hangs may be wedged: stop it, the next call starts afresh
        raise McpFailure(
            f"MCP server {self.spec.name!r} did not answer {tool} within {timeout:g} s.",
            transient=True,
            sent=True,
            timed_out=True,
        )

    async def list_tools(self) -> list[mcp_types.Tool]:
        client = await self.connected()
        tools, cursor = [], None
        try:
            for _ in range(_LIST_PAGES):
                page = await asyncio.wait_for(client.list_tools(cursor=cursor), self.spec.timeout)
                tools.extend(page.tools)
                cursor = page.next_cursor
                if cursor is None:
                    break
        except TimeoutError:
            raise McpFailure(
                f"MCP server {self.spec.name!r} did not list its tools within {self.spec.timeout:g} s.",
                transient=True,
                sent=False,
                timed_out=True,
            ) from None
        except Exception as exc:
            raise self.describe(exc, "list") from None
        return tools


class _Bridge:
    """The MCP thread's loop and the sessions it owns (touched only on that loop)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pid = 0
        self._sessions: dict[tuple[int, ServerSpec], _Session] = {}
        # Sessions being closed, by run: a run's release waits for them too.
        self._closing: dict[int, set[asyncio.Task]] = {}

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            # A forked child inherits the loop object but not its thread: it starts its own.
            if self._loop is None or self._pid != os.getpid():
                self._loop = asyncio.new_event_loop()
                self._pid = os.getpid()
                self._sessions, self._closing = {}, {}
                threading.Thread(target=self._loop.run_forever, name="mcp-loop", daemon=True).start()
            return self._loop

    def active(self) -> bool:
        return self._loop is not None and self._pid == os.getpid()

    def run(self, coroutine: Coroutine, timeout: float) -> Any:
        future = asyncio.run_coroutine_threadsafe(coroutine, self._running_loop())
        try:
            return future.result(timeout + _GRACE_SECONDS)
        except TimeoutError:
            future.cancel()
            raise McpFailure("The MCP client stopped answering.", transient=True, sent=True, timed_out=True) from None

    def _retire(self, run_id: int, key: tuple[int, ServerSpec]) -> None:
        session = self._sessions.pop(key)
        closing = self._closing.setdefault(run_id, set())
        task = asyncio.get_running_loop().create_task(session.close())
        closing.add(task)
        task.add_done_callback(closing.discard)

    async def _call(self, spec: ServerSpec, run_id: int, cwd: Path | None, tool: str, arguments: dict, timeout: float):
        key = (run_id, spec)
        if key in self._sessions and not self._sessions[key].usable:
            self._retire(run_id, key)
        session = self._sessions.get(key)
        if session is None:
            session = self._sessions[key] = _Session(spec, cwd)
        try:
            return await session.call(tool, arguments, timeout)
        finally:
            if not session.usable and self._sessions.get(key) is session:
                self._retire(run_id, key)

    async def _list(self, spec: ServerSpec) -> list[mcp_types.Tool]:
        with tempfile.TemporaryDirectory(prefix="mcp-list-") as cwd:
            session = _Session(spec, Path(cwd))
            try:
                return await session.list_tools()
            finally:
                await session.close()

    async def _release(self, run_id: int | None) -> None:
        for key in [key for key in self._sessions if run_id is None or key[0] == run_id]:
            self._retire(key[0], key)
        runs = list(self._closing) if run_id is None else [run_id]
        tasks = [task for run in runs for task in self._closing.pop(run, ())]
        if tasks:
            await asyncio.wait(tasks)


_BRIDGE = _Bridge()


def call_tool(
    spec: ServerSpec, *, run_id: int, cwd: Path | None, tool: str, arguments: dict[str, Any], timeout: float
) -> mcp_types.CallToolResult:
    """Call ``tool`` on the run's session with ``spec`` (started if need be). Raises McpFailure."""
    return _BRIDGE.run(_BRIDGE._call(spec, run_id, cwd, tool, arguments, timeout), spec.timeout + timeout)


def list_tools(spec: ServerSpec) -> list[mcp_types.Tool]:
    """Every tool the server lists, from a session of its own (in an empty working directory)."""
    return _BRIDGE.run(_BRIDGE._list(spec), spec.timeout * (_LIST_PAGES + 1) + _CLOSE_SECONDS)


def release(run_id: int) -> None:
    """Close the run's sessions (stdio: stop their processes), waiting until they are closed."""
    if _BRIDGE.active():  # the sessions are the loop's to look at: asked there
        try:
            _BRIDGE.run(_BRIDGE._release(run_id), _CLOSE_SECONDS)
        except McpFailure:  # the run has ended either way; say so and let it
            logger.error("closing the MCP sessions of run %s took too long", run_id)


@atexit.register
def shutdown() -> None:
    """Close every session of this process (its stdio servers stop with it)."""
    if _BRIDGE.active():
        try:
            _BRIDGE.run(_BRIDGE._release(None), _CLOSE_SECONDS)
        except Exception:  # at exit there is nobody left to tell but the log
            logger.exception("closing the MCP sessions at exit failed")
