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
from gateway.conversations import Conversations
from gateway.jobs import CommandJob, HoldJob, Job, MessageJob, message_of, recovery_jobs
from gateway.loopwatch import SETTING as LOOP_SETTING
from gateway.loopwatch import LoopWatch, Minute
from gateway.metrics import Metrics
from gateway.outbound import Outbound
from gateway.resets import Clock, ResetPolicy, Resets, utc_now
from gateway.router import ChatRouter
from gateway.streaming import Streaming, StreamSettings
from gateway.worker import GENERIC_FAILURE, ChatWorker
from platforms.base import InboundMessage, PlatformAdapter, PlatformFactory
from storage.base import SessionStore
from storage.models import InboundRecord

if TYPE_CHECKING:
    from agent.providers.transcribe import Transcriber

log = logging.getLogger(__name__)

DRAIN_TIMEOUT_S = 30.0
CONNECT_RETRIES_S = (2.0, 5.0, 15.0, 30.0, *[60.0] * 10_000)  # then every minute


class Gateway:
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
            busy=self.router.busy, adopt=self._adopt, ttl=lease_seconds)
        self.metrics.watch_router(self.router.activity)
        self.loop = LoopWatch(observe=self.metrics.loop_lag.observe, report=self.record_lag)
        self.worker.loop = self.loop
        self.metrics.watch_counters(
            "threadline_platform_events", "Platform events worth counting (an update the "
            "library could not read, ...)", ("platform", "event"),
            lambda: [(a.name, a.counters) for a in self.adapters.values()])
        self.metrics.watch_counters(
            "threadline_untrusted_work", "Jobs on what strangers sent (reading files, "
            "formatting replies) by how they ended", ("pool", "outcome"),
            lambda: [(p.name, p.outcomes) for p in (self.reader.pool,
                                                     self.outbound.renderer.pool)])
        self._state = "new"  # new | initialized | running | stopped | closed
        self._started: list[PlatformAdapter] = []
        self._connecting: list[asyncio.Task[None]] = []
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
        self._state = "running"
        self.resets.start()
        self.loop.start()
        if self._metrics_at is not None:
            try:
                self.metrics.serve(*self._metrics_at)
            except OSError as exc:  # metrics are for watching; they never stop the service
                log.error("metrics: cannot listen on %s:%d: %s", *self._metrics_at,
                          exc.strerror or exc)
        for adapter in self.adapters.values():
            if self.cluster is not None and adapter.exclusive:  # one receiver among processes
                self._connecting.append(asyncio.create_task(self._lead_then_connect(adapter)))
            elif not await self._bring_up(adapter):
                self._connecting.append(asyncio.create_task(self._keep_connecting(adapter)))
        if self.cluster is not None:
            await self.cluster.start()  # adopts what dead processes left open

    async def _bring_up(self, adapter: PlatformAdapter) -> bool:
        try:
            await adapter.initialize()
            await self._register_commands(adapter)
            # What the last run left open is read before anything new can arrive: a
            # message received once the adapter runs is routed live, never recovered too.
            left_open = ([] if self.cluster is not None else  # the cluster adopts those
                         [r for r in await self.store.open_inbound()
                          if r.platform == adapter.name])
            await adapter.start()
        except Exception as exc:
            log.error("%s: cannot connect: %s", adapter.name, plain_error(exc))
            return False
        self._started.append(adapter)
        await self._recover(left_open)
        return True

    async def _register_commands(self, adapter: PlatformAdapter) -> None:
        """The platform's command menu, before messages flow (so a slash command is known
        the moment it can arrive); what was registered is kept for the next start."""
        key = f"commands:{adapter.name}"
        try:
            kept = await adapter.register_commands(self.commands.menu(),
                                                   await self.store.get_setting(key))
            if kept is not None:
                await self.store.put_setting(key, kept)
        except Exception as exc:  # a command menu is a nicety, not a reason to stop
            log.warning("%s: registering commands failed: %s", adapter.name, plain_error(exc))

    async def _lead_then_connect(self, adapter: PlatformAdapter) -> None:
        assert self.cluster is not None
        await self.cluster.lead(f"poll:{adapter.name}")
        if not await self._bring_up(adapter):
            await self._keep_connecting(adapter)

    async def _keep_connecting(self, adapter: PlatformAdapter) -> None:
        for delay in CONNECT_RETRIES_S:
            await asyncio.sleep(delay)
            if self._state != "running" or await self._bring_up(adapter):
                return

    async def stop(self, drain_timeout: float = DRAIN_TIMEOUT_S) -> None:
        if self._state != "running":
            return
        self._state = "stopped"
        self.resets.stop()
        await self.loop.stop()
        if self.cluster is not None:
            await self.cluster.stop()
        for task in self._connecting:
            task.cancel()
        for adapter in reversed(self._started):
            try:
                await adapter.stop()
            except Exception:
                log.exception("%s: stop failed", adapter.name)
        self._started.clear()
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
    async def handle(self, msg: InboundMessage) -> None:
        """An adapter's entry point: returns once the message is stored in the ledger (or
        deliberately ignored) and in its chat's order; what is said about it follows
        later, so an adapter handing messages over one by one (a poller that confirms
        each once stored) is never held up by a reply. Never raises into the platform
        library."""
        self._handling += 1
        self._quiet.clear()
        lock, users = self._entering.setdefault(msg.chat_key, (asyncio.Lock(), [0]))
        users[0] += 1
        after: Awaitable[object] | None = None
        try:
            async with lock:
                after = await self._accept(msg)
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
        command = parse_command(msg.text)
        if not self._addressed(msg, command):
            await self.outbound.delivered(msg.chat, (msg.message_id,))  # nothing to say
            return None
        if not self.auth.is_allowed(msg):
            return self._refuse(msg)
        if msg.is_edit:
            return await self._edit(msg)
        record = await self.store.ingest(
            platform=msg.platform, chat_id=msg.chat_id, message_id=msg.message_id,
            chat_key=msg.chat_key, text=msg.text, sender_id=msg.user_id,
            sender_name=msg.user_name, extra=_extra(msg))
        if record is None:
            log.info("ignoring redelivered message %s in %s", msg.message_id, msg.chat_key)
            await self.outbound.delivered(msg.chat, (msg.message_id,))
            return None
        return await self._route(msg, record, command)

    async def _refuse(self, msg: InboundMessage) -> None:
        refusal = self.auth.refusal(msg)
        if refusal:
            await self.outbound.send(msg.chat, refusal, msg.message_id, private=True)
        await self.outbound.delivered(msg.chat, (msg.message_id,))

    def _addressed(self, msg: InboundMessage, command: Invocation | None) -> bool:
        """Whether the message is for us at all; everything else is ignored unanswered."""
        if msg.is_bot:
            return False  # other bots, and our own echoes
        adapter = self.adapters.get(msg.platform)
        ours = adapter.bot_username if adapter else None
        if command is not None and command.bot and ours and command.bot.lower() != ours.lower():
            log.info("ignoring /%s in %s: it is addressed to @%s", command.name, msg.chat_key,
                     command.bot)
            return False
        # Unaddressed group chatter never reaches the model.
        return not msg.is_group or msg.addressed_to_bot or msg.reply_to_bot

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
        if not msg.text.strip() and not msg.attachments:
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

    async def _adopt(self, record: InboundRecord) -> None:
        """A pending ledger row another process stored or left: routed as if received."""
        await self._routed(message_of(record), record)

    async def _routed(self, msg: InboundMessage, record: InboundRecord) -> None:
        """Route a stored row and wait for what is said about it (recovery, adoption)."""
        after = await self._route(msg, record, parse_command(record.text))
        if after is not None:
            await after

    # --- recovery ---------------------------------------------------------------------------
    async def _recover(self, rows: list[InboundRecord]) -> None:
        """Finish what was stored but never answered or delivered before a stop or crash.

        Stored replies the platform never took are sent (their missing chunks); messages
        are answered again; commands run again as commands, never as text for the model.
        A message whose turn was cut short may be what killed the process: its chat waits
        until everything else recovered here is done, and such chats then run one at a
        time, so a poison message cannot take other chats down with it again
        (docs/architecture.md, "Poison messages").
        """
        work = list(recovery_jobs(rows))
        held: dict[str, asyncio.Event] = {}  # chats with a turn cut short, in order
        for chat_key, job in work:
            if isinstance(job, MessageJob) and chat_key not in held:
                held[chat_key] = asyncio.Event()
                self.router.submit(chat_key, HoldJob(held[chat_key]))  # all of it waits
        for chat_key, job in work:
            if isinstance(job, tuple):  # a pending inbound message: route it like new
                await self._routed(*job)
            else:
                self.router.submit(chat_key, job)
        if held:
            others = {key for key, _ in work} - held.keys()
            task = asyncio.create_task(self._release_one_by_one(held, others),
                                       name="rerun-cut-short")
            self._connecting.append(task)  # cancelled by stop()

    async def _release_one_by_one(self, held: dict[str, asyncio.Event], others: set[str]
                                  ) -> None:
        for chat_key in others:
            await self.router.wait_idle(chat_key)
        for chat_key, release in held.items():
            release.set()
            await self.router.wait_idle(chat_key)


def _extra(msg: InboundMessage) -> dict[str, object]:
    """What the inbound row keeps beside the text, so a restart can route it again."""
    extra: dict[str, object] = {"thread_id": msg.thread_id, "is_group": msg.is_group,
                                "admin_hint": msg.is_admin_hint}
    if msg.attachments:
        extra["attachments"] = [a.as_dict() for a in msg.attachments]
    return extra
