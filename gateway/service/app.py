"""The gateway: the lifecycle of its parts, each built elsewhere (gateway/wiring/) and
handed in. A message's path does not run through here: adapters hand it to the intake
(inbound/), which has it routed to its chat's worker (turns/), which sends the reply
(delivery/)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from agent.errors import plain_error
from gateway.delivery.outbound import Outbound
from gateway.inbound.intake import Intake
from gateway.metrics import Metrics
from gateway.service.connections import Connections
from gateway.service.loopwatch import SETTING as LOOP_SETTING
from gateway.service.loopwatch import LoopWatch, Minute
from gateway.turns.attachments import AttachmentReader
from gateway.turns.cluster import Cluster
from gateway.turns.conversations import Conversations
from gateway.turns.recovery import Recovery
from gateway.turns.resets import Resets
from gateway.turns.router import ChatRouter
from platforms.base import PlatformAdapter
from storage.base import SessionStore
from storage.errors import StoreUnavailable

log = logging.getLogger(__name__)

DRAIN_TIMEOUT_S = 30.0


class Gateway:
    """Starts and stops the parts that receive messages, gate them, and answer each chat
    in order, once.

    Lifecycle: `initialize()` (store, adapters), `start()` (receive, recover what a crash
    left), `stop()` (stop receiving, drain running turns), `shutdown()` (close it all);
    `async with gateway:` initializes and always shuts down. Each step is a no-op when
    already done, and `start()` refuses to run before `initialize()`.
    """

    def __init__(self, store: SessionStore, conversations: Conversations,
                 adapters: Mapping[str, PlatformAdapter], *, intake: Intake,
                 router: ChatRouter, recovery: Recovery, outbound: Outbound, reader: AttachmentReader,
                 resets: Resets, connections: Connections, loop: LoopWatch,
                 cluster: Cluster | None, metrics: Metrics,
                 running: asyncio.Event, metrics_at: tuple[str, int] | None = None) -> None:
        self.store = store
        self.conversations = conversations
        self.adapters = adapters
        self.intake = intake
        self.router = router
        self.recovery = recovery
        self.outbound = outbound
        self.reader = reader
        self.resets = resets
        self.connections = connections
        self.loop = loop
        self.cluster = cluster
        self.metrics = metrics
        self._metrics_at = metrics_at  # (listen, port) of the endpoint; None: no endpoint
        self._running = running  # set while running: the intake and connections read it
        self._state = "new"  # new | initialized | running | stopped | closed
        loop.report = self.record_lag

    # --- lifecycle --------------------------------------------------------------------
    async def __aenter__(self) -> Gateway:
        await self.initialize()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    async def initialize(self) -> None:
        if self._state != "new":
            return
        await self.store.initialize()
        self._state = "initialized"

    async def start(self) -> None:
        """Connect every platform; one that cannot be reached is retried in the background
        (with growing pauses) while the others run. Each recovers its chats once up."""
        if self._state == "running":
            return
        if self._state != "initialized":
            raise RuntimeError(f"start() needs an initialized gateway, not a {self._state} one")
        await self.store.begin_run()  # after an unclean exit: checks the file first
        await self.outbound.moves.load()
        self.conversations.log_startup()
        await self.conversations.start()  # MCP servers: a slow one does not hold this up
        self._state = "running"
        self._running.set()
        self.resets.start()
        self.loop.start()
        if self._metrics_at is not None:
            try:
                self.metrics.serve(*self._metrics_at)
            except OSError as exc:  # metrics are for watching; they never stop the service
                log.error("metrics: cannot listen on %s:%d: %s", *self._metrics_at,
                          exc.strerror or exc)
        await self.connections.start()
        if self.cluster is not None:
            await self.cluster.start()  # adopts what dead processes left open

    async def stop(self, drain_timeout: float = DRAIN_TIMEOUT_S) -> None:
        if self._state != "running":
            return
        self._state = "stopped"
        self._running.clear()
        self.resets.stop()
        await self.loop.stop()
        if self.cluster is not None:
            await self.cluster.stop()
        self.recovery.stop()
        await self.connections.stop()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + drain_timeout
        await self.intake.settle(drain_timeout)
        await self.router.drain(max(0.0, deadline - loop.time()))
        self.intake.hush()  # still trying to say something: it stays stored
        if self.cluster is not None:  # drained: others may take our chats at once
            try:
                await self.cluster.release_all()
            except Exception as exc:  # they expire by themselves
                log.warning("releasing chat leases failed: %s", plain_error(exc))

    async def shutdown(self) -> None:
        if self._state == "closed":
            return
        ran = self._state in ("running", "stopped")  # a clean stop is said to the store
        await self.stop()
        self._state = "closed"
        self.metrics.close()
        for adapter in self.adapters.values():
            try:
                await adapter.shutdown()
            except Exception:
                log.exception("%s: shutdown failed", adapter.name)
        if ran:
            try:
                await self.store.end_run()
            except StoreUnavailable as exc:  # a full disk: the next start checks the file
                log.warning("recording a clean stop failed: %s", plain_error(exc))
            except Exception:
                log.exception("recording a clean stop failed")
        await self.store.shutdown()
        await self.conversations.aclose()
        await self.reader.aclose()
        await self.outbound.renderer.aclose()

    async def record_lag(self, minute: Minute) -> None:
        """The last minute's largest stall, for metrics and `threadline doctor` (the loop
        watch reports each minute here)."""
        self.metrics.loop_lag_max.set(minute.largest_s)
        await self.store.put_setting(LOOP_SETTING, minute.as_json())

    async def wait_closed(self) -> None:
        """Return when every adapter has ended by itself (the console at end of input)."""
        await asyncio.gather(*(a.wait_closed() for a in self.adapters.values()))
