"""The gateway's parts, each built once and handed what it needs, in the order a message
meets them: the door and the adapters, delivery, the turns, the intake; then what runs
around them (the connections, the loop watch) and the Gateway that starts and stops them.

A few parts need one built after them; those links are made here, by name, once both
exist: the door opens onto the intake, resets ask the router whether a chat is busy,
routing hands jobs to the cluster (which adopts rows through routing), the worker learns
the loop's pulse and which platforms are down, and with several processes the worker and
previews ask the cluster whether a chat is still theirs."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from gateway.auth import Authorizer, ask_adapters
from gateway.config import Config
from gateway.delivery.outbound import Outbound
from gateway.delivery.streaming import Streaming, StreamSettings
from gateway.inbound.door import Door
from gateway.inbound.gates import Gates
from gateway.inbound.intake import Intake
from gateway.inbound.ledger import Ledger
from gateway.metrics import Metrics
from gateway.service.app import Gateway
from gateway.service.connections import Connections
from gateway.service.loopwatch import LoopWatch
from gateway.store_open import build_store
from gateway.turns.attachments import AttachmentReader, ReaderSettings
from gateway.turns.cluster import Cluster
from gateway.turns.commands import CommandTable, default_commands
from gateway.turns.conversations import Conversations
from gateway.turns.recovery import Recovery
from gateway.turns.resets import Clock, ResetPolicy, Resets, utc_now
from gateway.turns.router import ChatRouter
from gateway.turns.routing import Routing
from gateway.turns.worker import ChatWorker
from gateway.wiring.conversations import build_conversations, build_transcriber
from gateway.wiring.settings import reader_settings
from platforms.base import PlatformAdapter, PlatformFactory
from storage.base import SessionStore

if TYPE_CHECKING:
    from agent.providers.transcribe import Transcriber
    from storage.sqlite.opening import Access


def create_gateway(config: Config, platforms: Sequence[PlatformFactory] = (), *,
                   commands: CommandTable | None = None, clock: Clock = utc_now,
                   access: Access = "upgrade") -> Gateway:
    """The gateway; `access`: whether it may upgrade the store's schema (store_open.py)."""
    store = build_store(config, access)
    metrics = Metrics()
    m = config.metrics
    return build_gateway(
        store, build_conversations(config, store, metrics, clock), platforms,
        auth=Authorizer(config), commands=commands, coalesce_ms=config.gateway.coalesce_ms,
        lease_seconds=config.gateway.lease_seconds,
        resets=ResetPolicy.from_config(config.gateway.session_reset), clock=clock,
        metrics=metrics, metrics_at=(m.listen, m.port) if m.port else None,
        streaming=StreamSettings(config.streaming.enabled,
                                 config.streaming.min_interval_ms / 1000),
        attachments=reader_settings(config), transcriber=build_transcriber(config))


def build_gateway(store: SessionStore, conversations: Conversations,
                  platforms: Sequence[PlatformFactory], *, auth: Authorizer,
                  commands: CommandTable | None = None, coalesce_ms: int = 1500,
                  resets: ResetPolicy | None = None, clock: Clock = utc_now,
                  metrics: Metrics | None = None, metrics_at: tuple[str, int] | None = None,
                  streaming: StreamSettings | None = None,
                  attachments: ReaderSettings | None = None,
                  transcriber: Transcriber | None = None, lease_seconds: float = 30.0
                  ) -> Gateway:
    """The gateway on a store and conversations built already: `create_gateway` builds
    them from the config; a benchmark brings its own."""
    metrics = metrics or Metrics()
    commands = commands or default_commands()
    door = Door()
    adapters: dict[str, PlatformAdapter] = {}
    for make in platforms:
        adapter = make(door.handle)
        adapters[adapter.name] = adapter
    auth.lookup = ask_adapters(adapters)
    outbound = Outbound(adapters, store, metrics)
    resetting = Resets(resets or ResetPolicy(), store, conversations, clock)
    live = Streaming(streaming or StreamSettings(enabled=False), adapters, outbound.budgets,
                     metrics, outbound.renderer, store)
    reader = AttachmentReader(
        adapters, conversations.files, store, settings=attachments, transcriber=transcriber,
        vision=conversations.provider.vision, text_room=conversations.message_room,
        metrics=metrics)
    worker = ChatWorker(store, conversations, outbound, commands, auth, resetting, metrics,
                        live, reader)
    router = ChatRouter(worker.process, coalesce_ms=coalesce_ms)
    resetting.busy = lambda key: router.running(key) is not None
    routing = Routing(store=store, outbound=outbound, conversations=conversations,
                      reader=reader, commands=commands, worker=worker, router=router)
    # Several processes on one database: chat leases decide who answers (cluster.py).
    cluster = None if store.coordination is None else Cluster(
        store.coordination, open_rows=store.open_inbound, submit=router.submit,
        busy=router.busy, adopt=routing.adopt, ttl=lease_seconds, moved=conversations.moved)
    routing.cluster = cluster
    running = asyncio.Event()  # set while the gateway runs
    intake = Intake(outbound, gates=Gates(adapters, auth, conversations, outbound),
                    ledger=Ledger(store, adapters, outbound, routing), routing=routing,
                    running=running)
    door.open(intake)
    recovery = Recovery(router, routing)
    loop = LoopWatch(observe=metrics.loop_lag.observe)  # reports to Gateway.record_lag
    worker.pulse = loop.worst_recent
    _watch(metrics, router, adapters, reader, outbound, cluster)
    connections = Connections(adapters, store, menu=commands.menu, metrics=metrics,
                              cluster=cluster, recover=recovery.recover, running=running.is_set)
    worker.platforms_down = connections.describe
    if cluster is not None:  # the worker, previews and sends ask whether the chat is ours
        store.member(cluster.holder)
        worker.may_act = live.may_act = cluster.may_act
        worker.forfeit = cluster.forfeit
        worker.fence_of = cluster.fence_of
        outbound.holds = cluster.holds
    return Gateway(store, conversations, adapters, intake=intake, router=router,
                   recovery=recovery, outbound=outbound, reader=reader, resets=resetting,
                   connections=connections, loop=loop, cluster=cluster, metrics=metrics,
                   running=running, metrics_at=metrics_at)


def _watch(metrics: Metrics, router: ChatRouter, adapters: Mapping[str, PlatformAdapter],
           reader: AttachmentReader, outbound: Outbound, cluster: Cluster | None) -> None:
    """What metrics read from the gateway's parts at scrape time."""
    metrics.watch_router(router.activity)
    metrics.watch_counters(
        "threadline_platform_events", "Platform events worth counting (an update the "
        "library could not read, ...)", ("platform", "event"),
        lambda: [(a.name, a.counters) for a in adapters.values()])
    metrics.watch_counters(
        "threadline_untrusted_work", "Jobs on what strangers sent (reading files, "
        "formatting replies) by how they ended", ("pool", "outcome"),
        lambda: [(p.name, p.outcomes) for p in (reader.pool, outbound.renderer.pool)])
    if cluster is not None:
        metrics.watch_times(
            "threadline_cluster_last_ok_timestamp_seconds", "When each cluster loop "
            "(renew, heartbeat, listen) last did its work (unix seconds)", "loop",
            cluster.health)
