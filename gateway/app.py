"""The gateway: lifecycle, wiring, and the path of every inbound message."""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict

from agent.engines import resolve_engine_factory
from agent.providers.factory import build_provider
from agent.tokens import estimate_text
from gateway import commands as cmd
from gateway.auth import Authorizer
from gateway.config import Config
from gateway.conversation import AgentSettings, Conversations, Outgoing
from gateway.providers import main_settings, summary_settings
from gateway.router import ChatRouter, Job
from platforms.base import ChatRef, InboundMessage, PlatformAdapter
from platforms.text import split_message
from storage.base import SessionStore
from storage.models import InboundRecord
from storage.sqlite import SqliteSessionStore

log = logging.getLogger(__name__)

DRAIN_TIMEOUT_S = 30.0
TYPING_REFRESH_S = 4.0
MAX_MESSAGE_SHARE = 0.5  # a single message may fill at most half of the model's window
GENERIC_FAILURE = "Sorry, something went wrong on my side. Please try again."


class Gateway:
    """Receives messages from adapters, gates them, and answers each chat in order, once."""

    def __init__(self, config: Config, store: SessionStore, conversations: Conversations,
                 adapters: list[PlatformAdapter]) -> None:
        self.config = config
        self.store = store
        self.conversations = conversations
        self.adapters = {a.name: a for a in adapters}
        self.auth = Authorizer(config)
        self.router = ChatRouter(self._process, coalesce_ms=config.gateway.coalesce_ms)
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
            await self.send(msg.chat, GENERIC_FAILURE, msg.message_id)
            await self._delivered(msg.chat, (msg.message_id,))

    async def _handle(self, msg: InboundMessage) -> None:
        if msg.is_bot:
            return  # other bots, and our own echoes
        if msg.is_group and not (msg.addressed_to_bot or msg.reply_to_bot):
            return  # unaddressed group chatter never reaches the model
        if not self.auth.is_allowed(msg):
            refusal = self.auth.refusal(msg)
            if refusal:
                await self.send(msg.chat, refusal, msg.message_id)
            return await self._delivered(msg.chat, (msg.message_id,))
        if msg.is_edit:
            return await self._edit(msg)
        record = await self.store.ingest(
            platform=msg.platform, chat_id=msg.chat_id, message_id=msg.message_id,
            chat_key=msg.chat_key, text=msg.text, sender_id=msg.user_id,
            sender_name=msg.user_name,
            extra={"thread_id": msg.thread_id, "is_group": msg.is_group})
        if record is None:
            log.info("ignoring redelivered message %s in %s", msg.message_id, msg.chat_key)
            return await self._delivered(msg.chat, (msg.message_id,))
        command = cmd.parse_command(msg.text)
        if command is not None:
            return await self._command(msg, record, command)
        refusal = self._unreadable(msg)
        if refusal:
            await self.store.finish_inbound([record.id], "failed")
            await self.send(msg.chat, refusal, msg.message_id)
            return await self._delivered(msg.chat, (msg.message_id,))
        self.router.submit(msg.chat_key, Job("message", (msg.chat, record)))

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
        status = await self.store.update_inbound_text(msg.platform, msg.chat_id,
                                                      msg.message_id, msg.text)
        log.info("edit of %s in %s (%s): %s", msg.message_id, msg.chat_key, status,
                 "applied" if status == "pending" else "ignored")

    async def _command(self, msg: InboundMessage, record: InboundRecord,
                       command: cmd.Command) -> None:
        if command.name in cmd.SERIAL:
            if not self.auth.may_manage(msg):
                await self._finish_command(msg, record, f"/{command.name} is admin-only here.")
                return
            self.router.submit(msg.chat_key, Job("command", (msg, record, command)))
            return
        await self._finish_command(msg, record, await self._immediate(msg, command))

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
            if msg.is_group and not self.auth.is_admin(msg):
                return "/stop is admin-only here."
            return "Stopping." if self.router.cancel_current(msg.chat_key) else "Nothing to stop."
        return f"Unknown command /{name}. {cmd.help_text()}"

    async def _finish_command(self, msg: InboundMessage, record: InboundRecord,
                              reply: str) -> None:
        await self.store.finish_inbound([record.id], "answered")
        await self.send(msg.chat, reply, msg.message_id)
        await self._delivered(msg.chat, (msg.message_id,))

    # --- the chat worker ------------------------------------------------------------------
    async def _process(self, chat_key: str, jobs: list[Job]) -> None:
        if jobs[0].kind == "command":
            msg, record, command = jobs[0].payload
            try:
                reply = await self._serial_command(msg, command)
            except Exception:
                log.exception("/%s failed in %s", command.name, chat_key)
                reply = GENERIC_FAILURE
            return await self._finish_command(msg, record, reply)
        chat: ChatRef = jobs[0].payload[0]
        records: list[InboundRecord] = [job.payload[1] for job in jobs]
        ids = tuple(r.message_id for r in records)
        typing = asyncio.create_task(self._keep_typing(chat))
        try:
            outgoing = await self.conversations.answer(chat, records)
        except asyncio.CancelledError:
            typing.cancel()
            await asyncio.shield(self._stopped(chat, ids))
            raise
        except Exception:
            log.exception("turn failed in %s", chat_key)
            self.conversations.forget(chat_key)  # rebuild from the store, not a half-turn
            await self.store.finish_inbound([r.id for r in records], "failed")
            outgoing = [Outgoing(GENERIC_FAILURE, records[-1].message_id)]
        finally:
            typing.cancel()
        for item in outgoing:
            await self.send(chat, item.text, item.reply_to)
        await self._delivered(chat, ids)

    async def _stopped(self, chat: ChatRef, ids: tuple[str, ...]) -> None:
        await self.send(chat, "Stopped. Your message is kept; send another when ready.", None)
        await self._delivered(chat, ids)

    async def _keep_typing(self, chat: ChatRef) -> None:
        adapter = self.adapters.get(chat.platform)
        if adapter is None:
            return
        while True:
            try:
                await adapter.typing(chat)
            except Exception as exc:  # typing is a nicety; never fail a turn for it
                log.debug("typing failed in %s: %s", chat.key, exc)
            await asyncio.sleep(TYPING_REFRESH_S)

    async def _serial_command(self, msg: InboundMessage, command: cmd.Command) -> str:
        if command.name == "new":
            await self.conversations.reset(msg.chat_key)
            return "Started a fresh conversation. The old one stays stored."
        return await cmd.compress_text(self.conversations, msg.chat_key, command.args)

    async def _recover(self) -> None:
        """Answer what was stored but never answered before the last stop or crash."""
        by_chat: dict[str, list[InboundRecord]] = defaultdict(list)
        for record in await self.store.open_inbound():
            by_chat[record.chat_key].append(record)
        for chat_key, records in by_chat.items():
            thread = records[0].extra.get("thread_id")
            chat = ChatRef(records[0].platform, records[0].chat_id, thread)
            log.info("recovering %d unanswered message(s) in %s", len(records), chat_key)
            for record in records:
                self.router.submit(chat_key, Job("message", (chat, record)))

    # --- outbound ---------------------------------------------------------------------
    async def send(self, chat: ChatRef, text: str, reply_to: str | None = None) -> None:
        adapter = self.adapters.get(chat.platform)
        if adapter is None:
            log.warning("no adapter for %s; dropping a reply to %s", chat.platform, chat.key)
            return
        for chunk in split_message(text, adapter.max_message_length):
            try:
                await adapter.send(chat, chunk, reply_to)
            except Exception:
                log.exception("%s: sending to %s failed", adapter.name, chat.key)
                return
            reply_to = None

    async def _delivered(self, chat: ChatRef, message_ids: tuple[str, ...]) -> None:
        adapter = self.adapters.get(chat.platform)
        if adapter is not None:
            await adapter.delivered(chat, message_ids)


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
