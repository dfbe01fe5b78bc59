"""The gateway: lifecycle, wiring, and the path of every inbound message."""

from __future__ import annotations

import asyncio
import logging

from agent.engines import resolve_engine_factory
from agent.providers.factory import build_provider
from agent.tokens import estimate_text
from gateway import commands as cmd
from gateway.auth import Authorizer
from gateway.config import Config
from gateway.conversation import AgentSettings, Conversations
from gateway.providers import main_settings, summary_settings
from gateway.router import ChatRouter, CommandJob, MessageJob, Running
from gateway.worker import GENERIC_FAILURE, ChatWorker, recovery_jobs
from platforms.base import InboundMessage, PlatformAdapter
from storage.base import SessionStore
from storage.models import InboundRecord
from storage.sqlite import SqliteSessionStore

log = logging.getLogger(__name__)

DRAIN_TIMEOUT_S = 30.0
MAX_MESSAGE_SHARE = 0.5  # a single message may fill at most half of the model's window


class Gateway:
    """Receives messages from adapters, gates them, and answers each chat in order, once."""

    def __init__(self, config: Config, store: SessionStore, conversations: Conversations,
                 adapters: list[PlatformAdapter]) -> None:
        self.config = config
        self.store = store
        self.conversations = conversations
        self.adapters = {a.name: a for a in adapters}
        self.auth = Authorizer(config)
        self.worker = ChatWorker(store, conversations, self.adapters)
        self.router = ChatRouter(self.worker.process, coalesce_ms=config.gateway.coalesce_ms)
        self._started: list[PlatformAdapter] = []

    # --- lifecycle --------------------------------------------------------------------
    async def initialize(self) -> None:
        await self.store.initialize()

    async def start(self) -> None:
        for adapter in self.adapters.values():
            adapter.bind(self.handle)
            await adapter.start()
            self._started.append(adapter)
            try:
                await adapter.register_commands(cmd.COMMANDS)
            except Exception as exc:  # a command menu is a nicety, not a reason to stop
                log.warning("%s: registering commands failed: %s", adapter.name, exc)
        await self._recover()

    async def stop(self, drain_timeout: float = DRAIN_TIMEOUT_S) -> None:
        for adapter in reversed(self._started):
            try:
                await adapter.stop()
            except Exception:
                log.exception("%s: stop failed", adapter.name)
        self._started.clear()
        await self.router.drain(drain_timeout)

    async def shutdown(self) -> None:
        await self.store.shutdown()
        await self.conversations.provider.aclose()
        if self.conversations.summary_provider is not self.conversations.provider:
            await self.conversations.summary_provider.aclose()

    async def wait_closed(self) -> None:
        """Return when every adapter has ended by itself (the console at end of input)."""
        await asyncio.gather(*(a.wait_closed() for a in self.adapters.values()))

    # --- inbound ------------------------------------------------------------------------
    async def handle(self, msg: InboundMessage) -> None:
        """An adapter's entry point; never raises into the platform library."""
        try:
            await self._handle(msg)
        except Exception:
            log.exception("handling a message in %s failed", msg.chat_key)
            await self.worker.send(msg.chat, GENERIC_FAILURE, msg.message_id)
            await self.worker.delivered(msg.chat, (msg.message_id,))

    async def _handle(self, msg: InboundMessage) -> None:
        command = cmd.parse_command(msg.text)
        if not self._addressed(msg, command):
            return await self.worker.delivered(msg.chat, (msg.message_id,))  # nothing to say
        if not self.auth.is_allowed(msg):
            refusal = self.auth.refusal(msg)
            if refusal:
                await self.worker.send(msg.chat, refusal, msg.message_id)
            return await self.worker.delivered(msg.chat, (msg.message_id,))
        if msg.is_edit:
            return await self._edit(msg)
        record = await self.store.ingest(
            platform=msg.platform, chat_id=msg.chat_id, message_id=msg.message_id,
            chat_key=msg.chat_key, text=msg.text, sender_id=msg.user_id,
            sender_name=msg.user_name,
            extra={"thread_id": msg.thread_id, "is_group": msg.is_group,
                   "admin_hint": msg.is_admin_hint})
        if record is None:
            log.info("ignoring redelivered message %s in %s", msg.message_id, msg.chat_key)
            return await self.worker.delivered(msg.chat, (msg.message_id,))
        await self._route(msg, record, command)

    def _addressed(self, msg: InboundMessage, command: cmd.Command | None) -> bool:
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
                     command: cmd.Command | None) -> None:
        """A stored inbound message: a command, a refusal, or a job for the chat's worker."""
        if command is not None:
            return await self._command(msg, record, command)
        refusal = self._unreadable(msg)
        if refusal:
            await self.store.finish_inbound([record.id], "failed")
            await self.worker.send(msg.chat, refusal, msg.message_id)
            return await self.worker.delivered(msg.chat, (msg.message_id,))
        self.router.submit(msg.chat_key, MessageJob(msg.chat, record))

    def _unreadable(self, msg: InboundMessage) -> str | None:
        if not msg.text.strip():
            if msg.attachments:
                kinds = ", ".join(sorted(set(msg.attachments)))
                return f"I can only read text for now, so I could not open that ({kinds})."
            return "That message was empty."
        window = self.conversations.provider.context_length
        if estimate_text(msg.text) > window * MAX_MESSAGE_SHARE:
            return (f"That message is too long for this model ({len(msg.text):,} characters; "
                    f"about {int(window * MAX_MESSAGE_SHARE * 4):,} fit). "
                    "Please send it in smaller parts.")
        return None

    async def _edit(self, msg: InboundMessage) -> None:
        """An edit replaces a still-queued message's text, under the rules for new ones."""
        found = await self.store.find_inbound(msg.platform, msg.chat_id, msg.message_id)
        if found is None or found.status != "pending":
            status = found.status if found else "unknown"
            log.info("edit of %s in %s (%s): ignored", msg.message_id, msg.chat_key, status)
            return
        refusal = self._unreadable(msg)
        if refusal:
            log.info("edit of %s in %s refused: %s", msg.message_id, msg.chat_key, refusal)
            await self.worker.send(msg.chat, f"{refusal} I kept the message as it was before "
                                   "the edit.", msg.message_id)
            return
        status = await self.store.update_inbound_text(msg.platform, msg.chat_id,
                                                      msg.message_id, msg.text)
        log.info("edit of %s in %s (%s): %s", msg.message_id, msg.chat_key, status,
                 "applied" if status == "pending" else "ignored")

    # --- commands -----------------------------------------------------------------------
    async def _command(self, msg: InboundMessage, record: InboundRecord,
                       command: cmd.Command) -> None:
        if command.name in cmd.SERIAL:
            if not self.auth.may_manage(msg):
                await self.worker.finish_command(msg, record, f"/{command.name} is admin-only here.")
                return
            self.router.submit(msg.chat_key, CommandJob(msg, record, command.name, command.args))
            return
        reply = await self._immediate(msg, command)
        await self.worker.finish_command(msg, record, reply)

    async def _immediate(self, msg: InboundMessage, command: cmd.Command) -> str:
        name = command.name
        if name == "help":
            return cmd.help_text()
        if name == "start":
            return cmd.start_text()
        if name in cmd.MANAGE and not self.auth.may_manage(msg):
            return f"/{name} is admin-only here."
        if name == "status":
            return await cmd.status_text(self.conversations, msg.chat_key)
        if name == "usage":
            return await cmd.usage_text(self.conversations, self.store, msg.chat_key)
        if name == "stop":
            return self._stop(msg, self.router.running(msg.chat_key))
        return f"Unknown command /{name}. {cmd.help_text()}"

    def _stop(self, msg: InboundMessage, running: Running | None) -> str:
        """/stop: the sender of the running turn or an admin (any user in a DM)."""
        if running is None:
            return "Nothing to stop."
        senders = {job.record.sender_id for job in running.jobs if hasattr(job, "record")}
        if msg.is_group and not (self.auth.is_admin(msg) or msg.user_id in senders):
            return "Only an admin or the person who asked can /stop this here."
        if running.stop("stop"):
            return "Stopping."
        if running.stoppable is not None:
            return "Too late to stop: the answer is already on its way."
        return "Nothing to stop."

    # --- recovery ---------------------------------------------------------------------------
    async def _recover(self) -> None:
        """Finish what was stored but never answered or delivered before a stop or crash.

        Stored replies the platform never accepted are sent; messages are answered again;
        commands run again as commands, never as text for the model.
        """
        for chat_key, job in recovery_jobs(await self.store.open_inbound()):
            if isinstance(job, tuple):  # a pending inbound message: route it like new
                msg, record = job
                await self._route(msg, record, cmd.parse_command(record.text))
            else:
                self.router.submit(chat_key, job)


def create_gateway(config: Config, adapters: list[PlatformAdapter]) -> Gateway:
    """The one place where real objects are built and wired together."""
    store = SqliteSessionStore(config.db_path)
    provider = build_provider(main_settings(config))
    aux = summary_settings(config)
    summary_provider = build_provider(aux) if aux is not None else provider
    engine_factory = resolve_engine_factory(config.context.engine, data_dir=config.data_dir)
    settings = AgentSettings(
        system_prompt=config.system_prompt,
        max_output_tokens=config.model.max_output_tokens,
        threshold=config.compression.threshold,
        target_ratio=config.compression.target_ratio,
        protect_last_n=config.compression.protect_last_n,
        compression_enabled=config.compression.enabled,
        summary_context_length=config.auxiliary.compression.context_length,
    )
    conversations = Conversations(store, provider=provider, summary_provider=summary_provider,
                                  engine_factory=engine_factory, settings=settings)
    return Gateway(config, store, conversations, adapters)
