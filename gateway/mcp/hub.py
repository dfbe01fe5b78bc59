"""Every configured MCP server, started with the gateway and stopped after its drain, and
each chat's view of their tools (docs/mcp.md).

A chat's registry asks its source for MCP tools at every request. The source answers
with the same tuple while nothing changed (no server came, went or changed its tools, no
chat became an admin's), so the schemas offered, and with them the request's prefix,
stay byte for byte the same from turn to turn. Each call is logged (server, tool,
outcome, time; never its arguments) and counted.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Iterable, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from agent.tools.mcp.connection import McpConnection, ServerSpec
from agent.tools.mcp.tools import mcp_tool
from agent.tools.registry import Tool, ToolSource
from gateway.mcp.access import McpAccess
from gateway.mcp.pictures import ToolPictures
from platforms.base import ChatRef

log = logging.getLogger(__name__)

STARTUP_WAIT_S = 5.0  # the gateway's start waits this long at most for its servers
STOP_S = 10.0  # for each server to stop (a program's own stop takes at most about 6 s)


class McpMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.calls = Counter("threadline_mcp_tool_calls", "Calls of MCP tools, by how they "
                             "ended (ok, error, timeout, invalid, cancelled)",
                             ["server", "tool", "outcome"], registry=registry)
        self.seconds = Histogram("threadline_mcp_tool_call_seconds", "How long MCP tool "
                                 "calls took", ["server"], registry=registry,
                                 buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120))
        self.up = Gauge("threadline_mcp_server_up", "1 while an MCP server is connected and "
                        "its tools are offered", ["server"], registry=registry)
        self.starts = Gauge("threadline_mcp_server_starts", "Sessions opened with each MCP "
                            "server since the gateway started (restarts add one)",
                            ["server"], registry=registry)

    def watch(self, connection: McpConnection) -> None:
        name = connection.name
        self.up.labels(name).set_function(lambda: float(connection.state == "up"))
        self.starts.labels(name).set_function(lambda: float(connection.starts))


class McpHub:
    def __init__(self, servers: Iterable[ServerSpec], access: McpAccess, *,
                 pictures: ToolPictures | None = None, metrics: McpMetrics | None = None
                 ) -> None:
        self.connections = {spec.name: McpConnection(spec, changed=self.changed)
                            for spec in sorted(servers, key=lambda spec: spec.name)}
        self.access = access
        self.pictures = pictures
        self.metrics = metrics
        self.generation = 0  # one more whenever what some chat is offered may have changed
        for connection in self.connections.values():
            if metrics is not None:
                metrics.watch(connection)

    def changed(self) -> None:
        self.generation += 1

    # --- lifecycle --------------------------------------------------------------------
    async def start(self, wait_s: float = STARTUP_WAIT_S) -> None:
        """Start every server; wait for each one's first try, but never past `wait_s`: a
        slow server's tools join when it is ready."""
        for connection in self.connections.values():
            connection.start()
        tried = [asyncio.ensure_future(c.tried.wait()) for c in self.connections.values()]
        if not tried:
            return
        _, pending = await asyncio.wait(tried, timeout=wait_s)
        for waiting in pending:
            waiting.cancel()
        slow = [c.name for c in self.connections.values() if not c.tried.is_set()]
        if slow:
            log.info("mcp: %s still starting; their tools join when ready", ", ".join(slow))

    async def stop(self) -> None:
        """Close every session and stop every server program (their process groups)."""
        await asyncio.gather(*(c.stop(STOP_S) for c in self.connections.values()))
        if self.pictures is not None:
            await self.pictures.aclose()

    # --- what chats see -----------------------------------------------------------------
    def note(self, chat: ChatRef, senders: Iterable[str | None]) -> None:
        """A chat's batch is about to run: it may turn out to be an admin's DMs."""
        if self.access.note(chat, senders):
            self.changed()

    def source(self, chat_key: str) -> ToolSource:
        return _ChatTools(self, chat_key)

    def tools_for(self, chat_key: str) -> tuple[Tool, ...]:
        """The tools offered in this chat now, sorted by name."""
        keep = self.pictures.keeper(chat_key) if self.pictures is not None else None
        tools = [mcp_tool(connection, listed, keep=keep,
                          observe=functools.partial(self._observed, name, listed.name))
                 for name, connection in self.connections.items()
                 if connection.tools and self.access.offered(name, chat_key)
                 for listed in connection.tools if self.access.allowed(name, listed.name)]
        return tuple(sorted(tools, key=lambda tool: tool.name))

    def _observed(self, server: str, tool: str, outcome: str, seconds: float) -> None:
        log.info("mcp %s: %s %s in %.2f s", server, tool, outcome, seconds)
        if self.metrics is not None:
            self.metrics.calls.labels(server, tool, outcome).inc()
            self.metrics.seconds.labels(server).observe(seconds)


class _ChatTools:
    """One chat's source: the same tuple until the hub's generation moves."""

    def __init__(self, hub: McpHub, chat_key: str) -> None:
        self.hub = hub
        self.chat_key = chat_key
        self._made: tuple[int, tuple[Tool, ...]] = (-1, ())

    def __call__(self) -> Sequence[Tool]:
        generation, tools = self._made
        if generation != self.hub.generation:
            tools = self.hub.tools_for(self.chat_key)
            self._made = (self.hub.generation, tools)
        return tools

