"""Everything the gateway says to a platform: split, send, typing, and "delivered"."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from platforms.base import ChatRef, PlatformAdapter
from platforms.text import split_message

log = logging.getLogger(__name__)

TYPING_REFRESH_S = 4.0


@dataclass(frozen=True)
class Outgoing:
    """A message to send to the chat; `reply_to` threads it under an inbound message."""

    text: str
    reply_to: str | None = None
    is_reply: bool = False  # the model's answer, whose delivery finishes the inbound rows


class Outbound:
    """Sends through the adapters; a platform error is logged and reported, never raised."""

    def __init__(self, adapters: Mapping[str, PlatformAdapter]) -> None:
        self.adapters = adapters

    async def send(self, chat: ChatRef, text: str, reply_to: str | None = None) -> bool:
        """Split and send; False (logged) when the platform refused any part of it."""
        adapter = self.adapters.get(chat.platform)
        if adapter is None:
            log.warning("no adapter for %s; dropping a reply to %s", chat.platform, chat.key)
            return False
        for chunk in split_message(text, adapter.max_message_length):
            try:
                await adapter.send(chat, chunk, reply_to)
            except Exception:
                log.exception("%s: sending to %s failed", adapter.name, chat.key)
                return False
            reply_to = None
        return True

    async def send_all(self, chat: ChatRef, outgoing: list[Outgoing]) -> bool:
        """Send in order; True when the reply itself was accepted by the platform."""
        accepted = False
        for item in outgoing:
            sent = await self.send(chat, item.text, item.reply_to)
            accepted = accepted or (sent and item.is_reply)
        return accepted

    async def delivered(self, chat: ChatRef, message_ids: tuple[str, ...]) -> None:
        """Tell the adapter everything about these inbound messages has been said."""
        adapter = self.adapters.get(chat.platform)
        if adapter is not None:
            await adapter.delivered(chat, message_ids)

    async def answer(self, chat: ChatRef, text: str, message_id: str) -> bool:
        """One reply to one inbound message, then "delivered" for it."""
        sent = await self.send(chat, text, message_id)
        await self.delivered(chat, (message_id,))
        return sent

    async def keep_typing(self, chat: ChatRef) -> None:
        """Refresh the typing indicator until cancelled; a failure never fails the turn."""
        adapter = self.adapters.get(chat.platform)
        if adapter is None:
            return
        while True:
            try:
                await adapter.typing(chat)
            except Exception as exc:
                log.debug("typing failed in %s: %s", chat.key, exc)
            await asyncio.sleep(TYPING_REFRESH_S)
