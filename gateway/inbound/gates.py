"""The checks a message passes before it is stored: is it for us at all (not a bot, not
a command for another bot, not unaddressed group chatter), and may its sender talk to the
bot. Whether it can be answered once stored is asked by routing (turns/routing.py)."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from gateway.auth import Authorizer
from gateway.delivery.outbound import Outbound
from gateway.turns.commands import Invocation
from gateway.turns.conversations import Conversations
from platforms.base import InboundMessage, PlatformAdapter
from platforms.text import visible

log = logging.getLogger(__name__)


class Gates:
    def __init__(self, adapters: Mapping[str, PlatformAdapter], auth: Authorizer,
                 conversations: Conversations, outbound: Outbound) -> None:
        self.adapters = adapters
        self.auth = auth
        self.conversations = conversations
        self.outbound = outbound

    def addressed(self, msg: InboundMessage, command: Invocation | None) -> bool:
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

    def says_nothing(self, msg: InboundMessage) -> bool:
        """A group message with nothing visible (only zero-width characters, say) is
        ignored; in a private chat it gets the short "empty" answer (Routing.unreadable)."""
        if not msg.is_group or msg.attachments or visible(msg.text):
            return False
        log.info("ignoring message %s in %s: nothing visible in it", msg.message_id,
                 msg.chat_key)
        return True

    async def overheard(self, msg: InboundMessage, command: Invocation | None) -> None:
        """An unaddressed message: kept as room context when its group keeps it and its
        sender may talk to the bot (a stranger's words never reach the model)."""
        room = self.conversations.room
        if room is not None and command is None and self.auth.is_allowed(msg):
            await room.observe(msg)

    def allowed(self, msg: InboundMessage) -> bool:
        return self.auth.is_allowed(msg)

    async def refuse(self, msg: InboundMessage) -> None:
        refusal = self.auth.refusal(msg)
        if refusal:
            await self.outbound.send(msg.chat, refusal, msg.message_id, private=True)
        await self.outbound.delivered(msg.chat, (msg.message_id,))
