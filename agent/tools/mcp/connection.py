"""One MCP server kept connected: started (or reached), its tools listed, and started
again with growing pauses whenever it fails or goes away (docs/mcp.md).

A supervisor task owns the server's session from start to end: the SDK's sessions must
be opened and closed in one task. Calls come from the chats' tasks and share it. While
the server is not up its tool list is empty, so the gateway offers none of its tools.
The supervisor notices a server going away at once when its program ends (stdio), and
otherwise when a request fails or when it asks for the tool list (every PROBE_S).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx2
import mcp_types as types
from jsonschema import SchemaError
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from agent.errors import plain_error
from agent.redact import REDACTED
from agent.tools.mcp.stdio import Program, describe_exit, stdio_transport

log = logging.getLogger(__name__)

STARTUP_S = 30.0  # to start (or reach) a server and list its tools
PROBE_S = 30.0  # a connected server is asked for its tools this often: is it still there?
PAUSES_S = (1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 60.0)  # before each new try, growing
STEADY_S = 60.0  # a server up this long starts its pauses over when it next fails
MAX_PAGES = 100  # of a tool listing: a listing that never ends cannot hang the supervisor
SEPARATOR = "__"  # NAME__tool
NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # what OpenAI and Anthropic accept as a tool name
CLIENT = types.Implementation(name="threadline", version="1")


class ServerDown(Exception):
    """The server is not connected right now."""


@dataclass(frozen=True)
class ServerSpec:
    """How to reach one server: a program (`command`) or a URL."""

    name: str
    command: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = 30.0  # one tool call

    @property
    def transport(self) -> str:
        return "stdio" if self.command else "http"


@dataclass(frozen=True)
class Listed:
    """One tool as its server lists it, with its input schema's validator made once."""

    name: str  # the server's own name for it
    description: str
    schema: dict[str, Any]
    validator: Validator = field(compare=False, repr=False)


class McpConnection:
    """`start()` the supervisor, `call()` a tool while `tools` is not empty, `stop()`."""

    def __init__(self, spec: ServerSpec, *, changed: Callable[[], None] = lambda: None,
                 startup_s: float = STARTUP_S, probe_s: float = PROBE_S) -> None:
        self.spec = spec
        self.name = spec.name
        self.tools: tuple[Listed, ...] = ()  # empty whenever the server is not up
        self.state = "new"  # new | starting | up | down | stopped
        self.tried = asyncio.Event()  # the first try ended, up or not
        self.starts = 0  # sessions opened (a restart is one more)
        self.program = Program(spec.name) if spec.command else None
        self._changed = changed
        self._startup_s, self._probe_s = startup_s, probe_s
        self._client: Client | None = None
        self._stop = asyncio.Event()
        self._check = asyncio.Event()  # ask the server now: a request failed oddly
        self._scope: anyio.CancelScope | None = None  # the session's, while it starts
        self._task: asyncio.Task[None] | None = None
        self._warned: set[tuple[str, str]] = set()  # (tool, why) said once each

    # --- lifecycle ------------------------------------------------------------------
    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._supervise(), name=f"mcp-{self.name}")

    async def stop(self, within_s: float = 10.0) -> None:
        """End the session (a stdio program with its process group) and the supervisor."""
        self._stop.set()
        if self._scope is not None and self.state == "starting":
            self._scope.cancel()  # no session to end politely yet
        task = self._task
        if task is None or task.done():
            self.state = "stopped"
            return
        done, _ = await asyncio.wait({task}, timeout=within_s)
        if not done:  # the transport's own stop is bounded; this is the last resort
            log.warning("mcp %s: still stopping after %g s; cancelling it", self.name,
                        within_s)
            task.cancel()
            with suppress(asyncio.CancelledError):
                await task

    async def list_once(self) -> tuple[Listed, ...]:
        """Open a session, list the tools, close it (`threadline doctor`); raises what
        went wrong, TimeoutError past the startup time."""
        with anyio.fail_after(self._startup_s):
            async with self._connect() as client:
                return await self._list(client)

    # --- calls ----------------------------------------------------------------------
    async def call(self, tool: str, arguments: dict[str, Any]) -> types.CallToolResult:
        """One tools/call. The loop's own timeout (the tool's timeout_s) ends it first; the
        SDK's, a little later, is only a backstop."""
        client = self._client
        if client is None or self.state != "up":
            raise ServerDown(f"the MCP server {self.name} is not connected right now")
        try:
            return await client.call_tool(tool, arguments,
                                          read_timeout_seconds=self.spec.timeout_s + 5)
        except MCPError as exc:
            if exc.error.code == types.CONNECTION_CLOSED:
                self._check.set()
            raise
        except (httpx2.TransportError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            self._check.set()  # is it still there? the supervisor asks at once
            raise

    # --- the supervisor ---------------------------------------------------------------
    async def _supervise(self) -> None:
        failures = 0
        loop = asyncio.get_running_loop()
        while not self._stop.is_set():
            began = loop.time()
            try:
                await self._session()
                why = "the session ended"  # only a stop ends it without an error
            except Exception as exc:
                why = describe_failure(exc, self.spec, self.program)
            was_up = self.state == "up"
            self._down()
            if self._stop.is_set():
                break
            failures = 1 if was_up and loop.time() - began >= STEADY_S else failures + 1
            pause = PAUSES_S[min(failures, len(PAUSES_S)) - 1]
            what = ("went away:" if was_up else "could not start:" if self.program
                    else "could not connect:")
            log.warning("mcp %s: %s %s; trying again in %g s", self.name, what, why, pause)
            with suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), pause)
        self.state = "stopped"
        self.tried.set()

    async def _session(self) -> None:
        """Open, list, serve until told to stop or the server goes; raise why it ended."""
        self.state = "starting"
        self.starts += 1
        loop = asyncio.get_running_loop()
        with anyio.CancelScope() as scope:
            self._scope = scope
            timer = loop.call_later(self._startup_s, scope.cancel)
            try:
                async with self._connect() as client:
                    listed = await self._list(client)
                    timer.cancel()
                    self._up(client, listed)
                    await self._serve(client)
            finally:
                timer.cancel()
                self._scope = None
        if scope.cancelled_caught and not self._stop.is_set():
            raise TimeoutError(f"not ready within {self._startup_s:g} s")

    @asynccontextmanager
    async def _connect(self) -> AsyncIterator[Client]:
        spec = self.spec
        if spec.command:
            assert self.program is not None
            transport: AbstractAsyncContextManager[Any] = stdio_transport(
                spec.command, spec.env, spec.cwd, self.program)
            async with Client(transport, cache=None, client_info=CLIENT,
                              message_handler=self._notified) as client:
                yield client
            return
        assert spec.url is not None
        timeout = httpx2.Timeout(30.0, read=max(300.0, spec.timeout_s + 10))
        async with httpx2.AsyncClient(headers=dict(spec.headers), timeout=timeout) as http:
            transport = streamable_http_client(spec.url, http_client=http)
            async with Client(transport, cache=None, client_info=CLIENT,
                              message_handler=self._notified) as client:
                yield client

    def _up(self, client: Client, listed: tuple[Listed, ...]) -> None:
        self._client, self.tools, self.state = client, listed, "up"
        self.tried.set()
        pid = f", pid {self.program.pid}" if self.program and self.program.pid else ""
        log.info("mcp %s: up (%s%s), %d tool(s)", self.name, self.spec.transport, pid,
                 len(listed))
        self._changed()

    def _down(self) -> None:
        was_up = self.state == "up"
        self._client, self.tools = None, ()
        self.state = "down"
        self.tried.set()
        if was_up:
            self._changed()

    async def _serve(self, client: Client) -> None:
        """Until stopped; raises when the server goes away (its program ended, or it no
        longer answers for its tool list)."""
        ended = self.program.ended if self.program is not None else asyncio.Event()
        while True:
            waits = {asyncio.ensure_future(e.wait()) for e in (self._stop, self._check, ended)}
            try:
                await asyncio.wait(waits, timeout=self._probe_s,
                                   return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiting in waits:
                    waiting.cancel()
            if self._stop.is_set():
                return
            if ended.is_set():
                raise ServerDown("its program ended")
            self._check.clear()
            with anyio.fail_after(self._startup_s):
                listed = await self._list(client)
            if listed != self.tools:
                log.info("mcp %s: its tools changed, %d now", self.name, len(listed))
                self.tools = listed
                self._changed()

    async def _notified(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self._check.set()  # list again now rather than at the next probe
        elif isinstance(message, Exception):
            log.debug("mcp %s: %s", self.name, plain_error(message, with_type=True))

    async def _list(self, client: Client) -> tuple[Listed, ...]:
        found: list[types.Tool] = []
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            page = await client.list_tools(cursor=cursor)
            found.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        listed = (self._listed(tool) for tool in found)
        return tuple(sorted((t for t in listed if t is not None), key=lambda t: t.name))

    def _listed(self, tool: types.Tool) -> Listed | None:
        """The tool as we offer it, or None (said once) when no model could call it."""
        schema = dict(tool.input_schema or {"type": "object", "properties": {}})
        why = None
        if not NAME.fullmatch(f"{self.name}{SEPARATOR}{tool.name}"):
            why = "its name has characters models refuse, or is too long"
        else:
            try:
                validator_for(schema).check_schema(schema)
            except SchemaError as exc:
                why = f"its input schema is not valid JSON Schema ({exc.message[:120]})"
        if why is not None:
            if (tool.name, why) not in self._warned:
                self._warned.add((tool.name, why))
                log.warning("mcp %s: tool %r left out: %s", self.name, tool.name[:80], why)
            return None
        return Listed(tool.name, tool.description or tool.title or "", schema,
                      validator_for(schema)(schema))


def describe_failure(exc: BaseException, spec: ServerSpec,
                     program: Program | None = None) -> str:
    """Why a server could not be reached or started, or went away, in one line: the first
    real error inside task groups' exception groups, and how its program ended and what
    it said last; its secrets (env and header values) masked even where no pattern
    knows them."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    message = str(exc)
    if program is not None and program.pid is not None:
        message = f"{message} ({describe_exit(program)})"
    for secret in (*spec.env.values(), *spec.headers.values(),
                   urlsplit(spec.url or "").password):
        if secret:
            message = message.replace(secret, REDACTED)
    line = plain_error(message, limit=400)
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__
