"""A message in the inbound ledger: its row, written once per platform message id
(a redelivery finds it there), and what its author changes while it waits for its turn:
an edit replaces its text, a delete skips it."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Mapping

from gateway.delivery.outbound import Outbound
from gateway.turns.jobs import extra_of
from gateway.turns.routing import Routing
from gateway.turns.worker import GENERIC_FAILURE
from platforms.base import InboundMessage, PlatformAdapter
from storage.base import SessionStore
from storage.errors import StoreUnavailable
from storage.models import InboundRecord

log = logging.getLogger(__name__)


class NotStored(Exception):
    """The ledger could not take a message (the database is out of reach)."""


class Ledger:
    def __init__(self, store: SessionStore, adapters: Mapping[str, PlatformAdapter],
                 outbound: Outbound, routing: Routing) -> None:
        self.store = store
        self.adapters = adapters
        self.outbound = outbound
        self.routing = routing  # whether an edit could be answered, by the same rules

    async def ingest(self, msg: InboundMessage) -> InboundRecord | None:
        """The message's new ledger row; None when it was stored before (redelivered).
        Raises NotStored when the store is out of reach."""
        try:
            return await self.store.ingest(
                platform=msg.platform, chat_id=msg.chat_id, message_id=msg.message_id,
                chat_key=msg.chat_key, text=msg.text, sender_id=msg.user_id,
                sender_name=msg.user_name, extra=extra_of(msg))
        except StoreUnavailable as exc:
            raise NotStored(str(exc)) from exc

    def not_stored(self, msg: InboundMessage, exc: NotStored) -> Awaitable[object] | None:
        """A platform that delivers the message again (Telegram) is left to; nothing is
        said, so the retry is answered once. Elsewhere the sender hears it failed."""
        adapter = self.adapters.get(msg.platform)
        again = adapter is not None and adapter.redelivers
        log.warning("message %s in %s could not be stored (%s); %s", msg.message_id,
                    msg.chat_key, exc, "the platform delivers it again" if again
                    else "its sender is told")
        return None if again else self.outbound.answer(msg.chat, GENERIC_FAILURE,
                                                       msg.message_id)

    async def deleted(self, msg: InboundMessage) -> None:
        """Its author took the message back: one still waiting for its turn is skipped
        (the worker reads the row's status before the turn)."""
        found = await self.store.find_inbound(msg.platform, msg.chat_id, msg.message_id)
        if found is None or found.status != "pending":
            return
        await self.store.finish_inbound([found.id], "failed")
        log.info("message %s in %s was deleted before its turn; skipped", msg.message_id,
                 msg.chat_key)
        await self.outbound.delivered(msg.chat, (msg.message_id,))

    async def edit(self, msg: InboundMessage) -> Awaitable[object] | None:
        """An edit replaces a still-queued message's text, under the rules for new ones."""
        found = await self.store.find_inbound(msg.platform, msg.chat_id, msg.message_id)
        if found is None or found.status != "pending":
            status = found.status if found else "unknown"
            log.info("edit of %s in %s (%s): ignored", msg.message_id, msg.chat_key, status)
            return None
        refusal = self.routing.unreadable(msg)
        if refusal:
            log.info("edit of %s in %s refused: %s", msg.message_id, msg.chat_key, refusal)
            return self.outbound.send(msg.chat, f"{refusal} I kept the message as it was "
                                      "before the edit.", msg.message_id)
        status = await self.store.update_inbound_text(msg.platform, msg.chat_id,
                                                      msg.message_id, msg.text)
        log.info("edit of %s in %s (%s): %s", msg.message_id, msg.chat_key, status,
                 "applied" if status == "pending" else "ignored")
        return None
