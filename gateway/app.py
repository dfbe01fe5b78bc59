"""The gateway: its lifecycle, and the path of every inbound message up to a chat's queue."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING

from agent.errors import plain_error
from gateway.attachments import AttachmentReader, ReaderSettings
from gateway.auth import Authorizer
from gateway.cluster import Cluster
from gateway.commands import CommandTable, Invocation, default_commands, parse_command
from gateway.connections import Connections
from gateway.conversations import Conversations
from gateway.intake import Intake, NotStored
from gateway.jobs import CommandJob, Job, MessageJob
from gateway.loopwatch import SETTING as LOOP_SETTING
from gateway.loopwatch import LoopWatch, Minute
from gateway.metrics import Metrics
from gateway.outbound import Outbound
from gateway.recovery import Recovering
from gateway.resets import Clock, ResetPolicy, Resets, utc_now
from gateway.router import ChatRouter
from gateway.streaming import Streaming, StreamSettings
from gateway.worker import GENERIC_FAILURE, ChatWorker
from platforms.base import InboundMessage, PlatformAdapter, PlatformFactory
from platforms.text import visible
from storage.base import SessionStore
from storage.errors import StoreUnavailable
from storage.models import InboundRecord

if TYPE_CHECKING:
    from agent.providers.transcribe import Transcriber

log = logging.getLogger(__name__)

DRAIN_TIMEOUT_S = 30.0


class Gateway(Intake, Recovering):
    """Receives messages from adapters, gates them, and answers each chat in order, once.

    Lifecycle: `initialize()` (store, adapters), `start()` (receive, recover what a crash
    left), `stop()` (stop receiving, drain running turns), `shutdown()` (close it all);
    `async with gateway:` initializes and always shuts down. Each step is a no-op when
    already done, and `start()` refuses to run before `initialize()`.
    """

    def __init__(self, store: SessionStore, conversations: Conversations,
                 platforms: Sequence[PlatformFactory], *, auth: Authorizer,
                 commands: CommandTable | None = None, coalesce_ms: int = 1500,
                 resets: ResetPolicy | None = None, clock: Clock = utc_now,
                 metrics: Metrics | None = None, metrics_at: tuple[str, int] | None = None,
                 streaming: StreamSettings | None = None,
                 attachments: ReaderSettings | None = None,
                 transcriber: Transcriber | None = None, lease_seconds: float = 30.0) -> None:
        self.store = store
        self.conversations = conversations
        self.auth = auth
        self.commands = commands or default_commands()
        self.adapters: dict[str, PlatformAdapter] = {}
        for make in platforms:
            adapter = make(self.handle)
            self.adapters[adapter.name] = adapter
        auth.lookup = self._check_admin
        self.metrics = metrics or Metrics()
        self._metrics_at = metrics_at  # (listen, port) of the endpoint; None: no endpoint
        self.outbound = Outbound(self.adapters, store, self.metrics)
        self.resets = Resets(resets or ResetPolicy(), store, conversations, clock,
                             busy=lambda key: self.router.running(key) is not None)
        live = Streaming(streaming or StreamSettings(enabled=False), self.adapters,
                         self.outbound.budgets, self.metrics, self.outbound.renderer, store)
        self.reader = AttachmentReader(
            self.adapters, conversations.files, store, settings=attachments,
            transcriber=transcriber, vision=conversations.provider.vision,
            text_room=conversations.message_room, metrics=self.metrics)
        self.worker = ChatWorker(store, conversations, self.outbound, self.commands, auth,
                                 self.resets, self.metrics, live, self.reader)
        self.router = ChatRouter(self.worker.process, coalesce_ms=coalesce_ms)
        # Several processes on one database: chat leases decide who answers (cluster.py).
        self.cluster = None if store.coordination is None else Cluster(
            store.coordination, open_rows=store.open_inbound, submit=self.router.submit,
            busy=self.router.busy, adopt=self._adopt, ttl=lease_seconds,
            moved=self._moved)
        self.loop = LoopWatch(observe=self.metrics.loop_lag.observe, report=self.record_lag)
        self.worker.loop = self.loop
        self._watch()
        self._state = "new"  # new | initialized | running | stopped | closed
        self.connections = Connections(
            self.adapters, store, menu=self.commands.menu, metrics=self.metrics,
            cluster=self.cluster, recover=self._recover,
            running=lambda: self._state == "running")
        self.worker.platforms_down = self.connections.describe
        self._fence(live)
        # Messages being handled right now (an immediate command answers inside handle(),
        # outside the router): stop() lets them finish too before adapters close.
        self._handling = 0
        # Each chat's messages are stored and routed one after another, in the order the
        # adapter handed them over: a store with a pool may finish two writes in either
        # order, and a chat's second message must never overtake its first.
        self._entering: dict[str, tuple[asyncio.Lock, list[int]]] = {}  # lock, [users]
        self._quiet = asyncio.Event()
        self._quiet.set()
        # What is being said about accepted messages, the newest per chat (each waits for
        # the one before it, so a chat's answers keep its order).
        self._answering: dict[str, asyncio.Task[None]] = {}

    def _fence(self, live: Streaming) -> None:
        """With several processes, the worker and previews ask whether the chat may be
        another's by now."""
        if self.cluster is not None:
            self.store.fence(self.cluster.holder)
            self.worker.may_act = live.may_act = self.cluster.may_act
            self.worker.forfeit = self.cluster.forfeit

    def _watch(self) -> None:
        """What metrics read from the gateway's parts at scrape time."""
        self.metrics.watch_router(self.router.activity)
        self.metrics.watch_counters(
            "threadline_platform_events", "Platform events worth counting (an update the "
            "library could not read, ...)", ("platform", "event"),
            lambda: [(a.name, a.counters) for a in self.adapters.values()])
        self.metrics.watch_counters(
            "threadline_untrusted_work", "Jobs on what strangers sent (reading files, "
            "formatting replies) by how they ended", ("pool", "outcome"),
            lambda: [(p.name, p.outcomes) for p in (self.reader.pool,
                                                     self.outbound.renderer.pool)])
        if self.cluster is not None:
            cluster = self.cluster
            self.metrics.watch_times(
                "threadline_cluster_last_ok_timestamp_seconds", "When each cluster loop "
                "(renew, heartbeat, listen) last did its work (unix seconds)", "loop",
                lambda: cluster.last_ok)

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
        self.resets.stop()
        await self.loop.stop()
        if self.cluster is not None:
            await self.cluster.stop()
        await self.connections.stop()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + drain_timeout
        try:
            await asyncio.wait_for(self._quiet.wait(), drain_timeout)
        except TimeoutError:
            log.warning("shutdown: %d message(s) still being handled after %.0fs",
                        self._handling, drain_timeout)
        await self.router.drain(max(0.0, deadline - loop.time()))
        for task in list(self._answering.values()):  # still trying to say something: it
            task.cancel()  # stays stored, and a command's row says whether it was answered
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

    async def _check_admin(self, msg: InboundMessage) -> bool:
        adapter = self.adapters.get(msg.platform)
        return await adapter.check_admin(msg) if adapter is not None else msg.is_admin_hint

    async def record_lag(self, minute: Minute) -> None:
        """The last minute's largest stall, for metrics and `threadline doctor`."""
        self.metrics.loop_lag_max.set(minute.largest_s)
        await self.store.put_setting(LOOP_SETTING, minute.as_json())

    async def wait_closed(self) -> None:
        """Return when every adapter has ended by itself (the console at end of input)."""
        await asyncio.gather(*(a.wait_closed() for a in self.adapters.values()))

    # --- inbound ------------------------------------------------------------------------
    async def handle(self, msg: InboundMessage) -> bool:
        """An adapter's entry point: returns once the message is stored in the ledger (or
        deliberately ignored) and in its chat's order; what is said about it follows
        later, so an adapter handing messages over one by one (a poller that confirms
        each once stored) is never held up by a reply. Never raises into the platform
        library. False when the store could not take it: a platform that delivers it
        again is left to (nothing is said); elsewhere the user hears it failed."""
        self._handling += 1
        self._quiet.clear()
        lock, users = self._entering.setdefault(msg.chat_key, (asyncio.Lock(), [0]))
        users[0] += 1
        after: Awaitable[object] | None = None
        stored = True
        try:
            async with lock:
                after = await self._accept(msg)
        except NotStored as exc:
            stored, after = False, self._not_stored(msg, exc)
        except StoreUnavailable as exc:  # stored, then the database went: a sweep routes it
            log.warning("message %s in %s is stored; routing it waits for the database (%s)",
                        msg.message_id, msg.chat_key, exc)
        except Exception:
            log.exception("handling a message in %s failed", msg.chat_key)
            after = self.outbound.answer(msg.chat, GENERIC_FAILURE, msg.message_id)
        finally:
            users[0] -= 1
            if not users[0]:
                del self._entering[msg.chat_key]  # nobody else is entering this chat
            if after is None:
                self._handled()
        if after is not None:
            key = msg.chat_key
            task = asyncio.create_task(self._then(msg, after, self._answering.get(key)),
                                       name=f"answer:{key}")
            self._answering[key] = task
            task.add_done_callback(
                lambda done: self._answering.pop(key) if self._answering.get(key) is done
                else None)
        return stored

    async def _then(self, msg: InboundMessage, work: Awaitable[object],
                    before: asyncio.Task[None] | None) -> None:
        """What is said about a message after it was accepted (a command's answer, a
        refusal), after what was said about the chat's previous one; counted as being
        handled until done, so a stop lets it finish."""
        try:
            if before is not None:
                await asyncio.wait([before])
            await work
        except Exception:
            log.exception("answering a message in %s failed", msg.chat_key)
        finally:
            self._handled()

    def _handled(self) -> None:
        self._handling -= 1
        if not self._handling:
            self._quiet.set()

    async def _accept(self, msg: InboundMessage) -> Awaitable[object] | None:
        """Gate, store and route a message; what remains to be said, to run later."""
        if msg.moved_to is not None:  # the platform moved the chat: follow it
            await self.outbound.moves.move(msg.chat, msg.moved_to)
            return None
        if msg.is_delete:
            await self._deleted(msg)
            return None
        command = parse_command(msg.text) if msg.may_command else None
        if not self._addressed(msg, command) or self._says_nothing(msg):
            if msg.is_group:
                await self._overheard(msg, command)
            await self.outbound.delivered(msg.chat, (msg.message_id,))  # nothing to say
            return None
        if not self.auth.is_allowed(msg):
            return self._refuse(msg)
        if msg.is_edit:
            return await self._edit(msg)
        record = await self._ingest(msg)
        if record is None:
            log.info("ignoring redelivered message %s in %s", msg.message_id, msg.chat_key)
            await self.outbound.delivered(msg.chat, (msg.message_id,))
            return None
        if self._state != "running":  # arrived while draining: the next run answers it
            log.info("message %s in %s arrived while stopping: stored, answered after the "
                     "restart", msg.message_id, msg.chat_key)
            return None
        return await self._route(msg, record, command)

    async def _route(self, msg: InboundMessage, record: InboundRecord,
                     command: Invocation | None) -> Awaitable[object] | None:
        """A stored inbound message: a command, a refusal, or a job for the chat's worker.
        Returns what remains to be said (an immediate command's answer, a refusal)."""
        if command is not None:
            return await self._command(msg, record, command)
        refusal = self._unreadable(msg)
        if refusal:
            await self.store.finish_inbound([record.id], "failed")
            return self.outbound.answer(msg.chat, refusal, msg.message_id)
        await self._enqueue(msg.chat_key, MessageJob(msg.chat, record))
        return None

    def _unreadable(self, msg: InboundMessage) -> str | None:
        refusal = self.reader.refusal(msg)  # attachments all declined, by what they are
        if refusal:
            return refusal
        if not visible(msg.text) and not msg.attachments:
            return "That message was empty."
        return self.conversations.too_long(msg.text)

    async def _edit(self, msg: InboundMessage) -> Awaitable[object] | None:
        """An edit replaces a still-queued message's text, under the rules for new ones."""
        found = await self.store.find_inbound(msg.platform, msg.chat_id, msg.message_id)
        if found is None or found.status != "pending":
            status = found.status if found else "unknown"
            log.info("edit of %s in %s (%s): ignored", msg.message_id, msg.chat_key, status)
            return None
        refusal = self._unreadable(msg)
        if refusal:
            log.info("edit of %s in %s refused: %s", msg.message_id, msg.chat_key, refusal)
            return self.outbound.send(msg.chat, f"{refusal} I kept the message as it was "
                                      "before the edit.", msg.message_id)
        status = await self.store.update_inbound_text(msg.platform, msg.chat_id,
                                                      msg.message_id, msg.text)
        log.info("edit of %s in %s (%s): %s", msg.message_id, msg.chat_key, status,
                 "applied" if status == "pending" else "ignored")
        return None

    async def _command(self, msg: InboundMessage, record: InboundRecord,
                       invocation: Invocation) -> Awaitable[object] | None:
        """Session-changing commands queue behind the chat's turns; the rest answer now
        (the answer is returned, to be awaited after the message is accepted)."""
        command = self.commands.find(invocation.name)
        # In the chat's order, whoever sent it (an unknown command is answered in order
        # too); whether the sender may run it is asked there, by the worker, so an admin
        # lookup never lets the next message overtake this one.
        if command is None or command.serial:
            name = command.name if command is not None else invocation.name
            await self._enqueue(msg.chat_key, CommandJob(msg, record, name, invocation.args))
            return None
        return self.worker.run_command(msg, record, invocation.name, invocation.args,
                                       chat=self.router.running(msg.chat_key))

    async def _enqueue(self, chat_key: str, job: Job) -> None:
        """To this chat's worker, here, or (sharing a database) to whoever holds the chat."""
        if self.cluster is None:
            self.router.submit(chat_key, job)
        else:
            await self.cluster.enqueue(chat_key, job)
