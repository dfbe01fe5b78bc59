"""Taking a message in: storing it in the ledger, and the small gates before that (who
and what is ignored, a deleted message, a refusal). Mixed into Gateway (app.py)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Mapping

from gateway.auth import Authorizer
from gateway.commands import Invocation
from gateway.conversations import Conversations
from gateway.jobs import extra_of
from gateway.outbound import Outbound
from gateway.worker import GENERIC_FAILURE
from platforms.base import InboundMessage, PlatformAdapter
from platforms.text import visible
from storage.base import SessionStore
from storage.errors import StoreUnavailable
from storage.models import InboundRecord

log = logging.getLogger(__name__)


class NotStored(Exception):
    """The ledger could not take a message (the database is out of reach)."""


class Intake:
    """Mixed into Gateway: its store, adapters, outbound, authorizer and conversations."""

    store: SessionStore
    conversations: Conversations
    adapters: Mapping[str, PlatformAdapter]
    outbound: Outbound
    auth: Authorizer

    async def _ingest(self, msg: InboundMessage) -> InboundRecord | None:
        """The message's new ledger row; None when it was stored before (redelivered).
        Raises NotStored when the store is out of reach."""
        try:
            return await self.store.ingest(
                platform=msg.platform, chat_id=msg.chat_id, message_id=msg.message_id,
                chat_key=msg.chat_key, text=msg.text, sender_id=msg.user_id,
                sender_name=msg.user_name, extra=extra_of(msg))
        except StoreUnavailable as exc:
            raise NotStored(str(exc)) from exc

    def _not_stored(self, msg: InboundMessage, exc: NotStored) -> Awaitable[object] | None:
        """A platform that delivers the message again (Telegram) is left to; nothing is
        said, so the retry is answered once. Elsewhere the sender hears it failed."""
        adapter = self.adapters.get(msg.platform)
        again = adapter is not None and adapter.redelivers
        log.warning("message %s in %s could not be stored (%s); %s", msg.message_id,
                    msg.chat_key, exc, "the platform delivers it again" if again
                    else "its sender is told")
        return None if again else self.outbound.answer(msg.chat, GENERIC_FAILURE,
                                                       msg.message_id)

    async def _deleted(self, msg: InboundMessage) -> None:
        """Its author took the message back: one still waiting for its turn is skipped
        (the worker reads the row's status before the turn)."""
        found = await self.store.find_inbound(msg.platform, msg.chat_id, msg.message_id)
        if found is None or found.status != "pending":
            return
        await self.store.finish_inbound([found.id], "failed")
        log.info("message %s in %s was deleted before its turn; skipped", msg.message_id,
                 msg.chat_key)
        await self.outbound.delivered(msg.chat, (msg.message_id,))

    def _says_nothing(self, msg: InboundMessage) -> bool:
        """A group message with nothing visible (only zero-width characters, say) is
        ignored; in a private chat it gets the short "empty" answer (`_unreadable`)."""
        if not msg.is_group or msg.attachments or visible(msg.text):
            return False
        log.info("ignoring message %s in %s: nothing visible in it", msg.message_id,
                 msg.chat_key)
        return True

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
        # Unaddressed group chatter never causes a model call (it may be kept as context).
        if not msg.is_group:
            return True
        room = self.conversations.room
        return room.rooms.addressed(msg) if room else msg.addressed_to_bot or msg.reply_to_bot

    async def _overheard(self, msg: InboundMessage, command: Invocation | None) -> None:
        """An unaddressed message: kept as room context when its group keeps it and its
        sender may talk to the bot (a stranger's words never reach the model)."""
        room = self.conversations.room
        if room is not None and command is None and self.auth.is_allowed(msg):
            await room.observe(msg)

