"""Bringing platforms up, keeping them up, and giving up on one that refuses the bot.

A platform that cannot be reached is retried in the background with growing pauses while
the others run. One that refuses the bot as configured (PlatformRefused: a bad token, an
intent not enabled) is said in one log line and shown down in /status and metrics; when
no platform is left the process ends with EX_CONFIG (78), which the systemd unit does not
restart (docs/operations.md, "A platform refuses the bot").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping

from agent.errors import plain_error
from gateway.metrics import Metrics
from gateway.turns.cluster import Cluster
from gateway.turns.jobs import chat_of
from platforms.base import PlatformAdapter, PlatformRefused, ResumePoint
from storage.base import SessionStore
from storage.models import InboundRecord

log = logging.getLogger(__name__)

CONNECT_RETRIES_S = (2.0, 5.0, 15.0, 30.0, *[60.0] * 10_000)  # then every minute
# After a refusal, with other platforms still running: an operator is fixing it.
REFUSED_RETRIES_S = (60.0, 120.0, 300.0, 600.0, *[900.0] * 10_000)
EX_CONFIG = 78  # sysexits.h: a configuration error; the unit's RestartPreventExitStatus

Recover = Callable[[list[InboundRecord]], Awaitable[None]]


class Connections:
    """The adapters' lifecycle for the gateway: start, retry, refuse, stop."""

    def __init__(self, adapters: Mapping[str, PlatformAdapter], store: SessionStore, *,
                 menu: Callable[[], list[tuple[str, str]]], metrics: Metrics,
                 cluster: Cluster | None, recover: Recover,
                 running: Callable[[], bool]) -> None:
        self.adapters = adapters
        self.store = store
        self._menu = menu
        self._metrics = metrics
        self._cluster = cluster
        self._recover = recover
        self._running = running
        self.started: list[PlatformAdapter] = []
        self.tasks: list[asyncio.Task[None]] = []
        self.refused: dict[str, str] = {}  # platform → what to fix
        self.gave_up = asyncio.Event()  # every platform refused the bot: nothing to run
        for adapter in adapters.values():
            adapter.on_refused = lambda exc, a=adapter: self._refused_later(a, exc)
            adapter.resume_points = lambda a=adapter: self.resume_points(a.name)
            metrics.platform_up.labels(adapter.name).set(0)

    async def start(self) -> None:
        for adapter in self.adapters.values():
            if self._cluster is not None and adapter.exclusive:  # one receiver among processes
                self.tasks.append(asyncio.create_task(self._lead_then_connect(adapter)))
            else:
                self._retry_unless_up(adapter, await self._bring_up(adapter))

    async def stop(self) -> None:
        """Stop receiving everywhere (sends keep working for the drain)."""
        for task in self.tasks:
            task.cancel()
        for adapter in reversed(self.started):
            try:
                await adapter.stop()
            except Exception:
                log.exception("%s: stop failed", adapter.name)
        self.started.clear()

    def describe(self) -> list[str]:
        """One line per platform that is not receiving, for /status."""
        up = {a.name for a in self.started}
        return [f"{name}: down ({self.refused.get(name, 'reconnecting')})"
                for name in self.adapters if name not in up]

    async def _bring_up(self, adapter: PlatformAdapter) -> bool | None:
        """True once receiving; False when it could not be reached (try again); None when
        it refused the bot (said, and handled by `_refused`)."""
        try:
            await adapter.initialize()
            await self._register_commands(adapter)
            # What the last run left open is read before anything new can arrive: a
            # message received once the adapter runs is routed live, never recovered too.
            left_open = ([] if self._cluster is not None else  # the cluster adopts those
                         [r for r in await self.store.open_inbound()
                          if r.platform == adapter.name])
            await adapter.start()
        except PlatformRefused as exc:
            await self._refused(adapter, exc)
            return None
        except Exception as exc:
            log.error("%s: cannot connect: %s", adapter.name, plain_error(exc))
            return False
        self.refused.pop(adapter.name, None)
        self.started.append(adapter)
        self._metrics.platform_up.labels(adapter.name).set(1)
        await self._recover(left_open)
        await adapter.catch_up()  # what was said while away, after what was left open
        return True

    async def _register_commands(self, adapter: PlatformAdapter) -> None:
        """The platform's command menu, before messages flow (so a slash command is known
        the moment it can arrive)."""
        try:
            await adapter.register_commands(self._menu())
        except PlatformRefused:
            raise
        except Exception as exc:  # a command menu is a nicety, not a reason to stop
            log.warning("%s: registering commands failed: %s", adapter.name, plain_error(exc))

    async def _lead_then_connect(self, adapter: PlatformAdapter) -> None:
        """Receive while this process holds the platform's role; when it may have lost it
        (a pause past the lease), stop receiving and stand by again."""
        cluster = self._cluster
        assert cluster is not None
        role = f"poll:{adapter.name}"
        while True:
            await cluster.lead(role)
            lost = asyncio.Event()
            adapter.may_receive = lambda: cluster.may_lead(role)
            adapter.on_standby = lost.set
            self._retry_unless_up(adapter, await self._bring_up(adapter))
            await lost.wait()
            log.warning("%s: this process may have lost %s (a pause past the lease); it "
                        "stops receiving and stands by", adapter.name, role)
            if adapter in self.started:
                self.started.remove(adapter)
                await adapter.stop()

    def _retry_unless_up(self, adapter: PlatformAdapter, outcome: bool | None) -> None:
        """After `_bring_up`: retried in the background unless up, or nothing is left."""
        if outcome is not True and not self.gave_up.is_set():
            self.tasks.append(asyncio.create_task(self._keep_connecting(
                adapter, CONNECT_RETRIES_S if outcome is False else REFUSED_RETRIES_S)))

    async def _keep_connecting(self, adapter: PlatformAdapter,
                               pauses: tuple[float, ...]) -> None:
        """Try again after each pause until up; a refusal moves to the longer pauses (an
        operator is fixing it), once."""
        for delay in pauses:
            await asyncio.sleep(delay)
            if not self._running() or self.gave_up.is_set():
                return
            outcome = await self._bring_up(adapter)
            if outcome is True:
                return
            if outcome is None and pauses is not REFUSED_RETRIES_S:
                return await self._keep_connecting(adapter, REFUSED_RETRIES_S)

    # --- refusals -----------------------------------------------------------------------
    def _refused_later(self, adapter: PlatformAdapter, exc: PlatformRefused) -> None:
        """An adapter's connection ended for good while running (its callback)."""
        if self._running():
            self.tasks.append(asyncio.create_task(self._refused_mid_run(adapter, exc)))

    async def _refused_mid_run(self, adapter: PlatformAdapter, exc: PlatformRefused) -> None:
        await self._refused(adapter, exc)
        self._retry_unless_up(adapter, None)

    async def _refused(self, adapter: PlatformAdapter, exc: PlatformRefused) -> None:
        """Said once per refusal, shown down; every platform refused: give up."""
        if adapter in self.started:
            self.started.remove(adapter)
        self.refused[adapter.name] = str(exc)
        self._metrics.platform_up.labels(adapter.name).set(0)
        try:
            await adapter.shutdown()
        except Exception as error:
            log.warning("%s: closing after the refusal failed: %s", adapter.name, error)
        if all(name in self.refused for name in self.adapters):
            log.error("%s: %s; no platform is left, stopping (exit %d: not restarted until "
                      "the configuration changes)", adapter.name, exc, EX_CONFIG)
            self.gave_up.set()
            return
        log.error("%s: %s; the other platforms keep running, and %s is tried again later",
                  adapter.name, exc, adapter.name)

    # --- catching up ------------------------------------------------------------------------
    async def resume_points(self, platform: str) -> list[ResumePoint]:
        """Each chat's newest stored message, and whether the chat has a live session."""
        live = {a.chat_key for a in await self.store.chat_activity()}
        return [ResumePoint(chat_of(record), record.message_id, record.received_at,
                            record.chat_key in live)
                for record in await self.store.latest_inbound(platform)]
