"""The PostgreSQL store's delivery rows: each reply part's state, the previews a
streamed reply was shown in, and chats that moved (docs/architecture.md, "Sending")."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from storage import rows
from storage.models import Delivery, OutChunk
from storage.postgres import queries as q
from storage.postgres import turns

if TYPE_CHECKING:
    from storage.live import LiveSessions


class DeliveryRows:
    """Mixed into PostgresSessionStore, whose query helpers it uses."""

    _live: LiveSessions
    fetch: Any  # PostgresSessionStore.fetch
    _execute: Any
    _run: Any
    _fence: Any  # PostgresSessionStore._fence

    async def deliveries(self, inbound_id: int) -> list[Delivery]:
        return [rows.delivery(row) for row in await self.fetch(q.DELIVERIES_OF, inbound_id)]

    async def mark_delivered(self, inbound_id: int, chunk: int,
                             platform_message_id: str | None, *, failed: bool = False) -> None:
        await self._execute(q.MARK_DELIVERED, "failed" if failed else "sent",
                            platform_message_id, time.time(), inbound_id, chunk)

    async def mark_sending(self, inbound_id: int, chunk: int) -> bool:
        epoch = await self._fence("mark_sending")

        async def work(con: Any) -> bool:
            if await con.fetchval(q.SENDING, inbound_id, chunk, epoch) is not None:
                return True
            if epoch is not None and not await con.fetchval(q.FENCE_OF_ROWS, [inbound_id],
                                                            epoch):
                raise turns.lease_lost(f"reply part {chunk} to inbound {inbound_id}", epoch)
            return False  # sent already
        return await self._run(work, transaction=False)

    async def mark_not_sent(self, inbound_id: int, chunk: int) -> None:
        await self._execute(q.NOT_SENT, inbound_id, chunk)

    async def move_chat(self, platform: str, old_chat_id: str, new_chat_id: str) -> None:
        await self._run(lambda con: q.move_chat(con, platform, old_chat_id, new_chat_id,
                                                time.time()))
        self._live.clear()  # keyed by chat: the moved one is under another key now

    async def chat_moves(self) -> dict[tuple[str, str], str]:
        return {(row[0], row[1]): row[2] for row in await self.fetch(q.CHAT_MOVES)}

    async def record_notice(self, inbound_id: int, chunks: Sequence[OutChunk]) -> None:
        epoch = await self._fence("record_notice")

        async def work(con: Any) -> None:
            if epoch is not None and not await con.fetchval(q.FENCE_OF_ROWS, [inbound_id],
                                                            epoch):
                raise turns.lease_lost(f"the notice to inbound {inbound_id}", epoch)
            if await con.fetchval(q.ANY_DELIVERY, inbound_id) is None:
                await q.insert_delivery(con, inbound_id, None, chunks)
        await self._run(work)

    async def record_preview(self, inbound_id: int, position: int, message_id: str) -> None:
        await self._execute(q.ADD_PREVIEW, inbound_id, position, message_id)

    async def previews(self, inbound_ids: list[int]) -> dict[int, list[str]]:
        shown: dict[int, list[str]] = {}
        for row in await self.fetch(q.PREVIEWS_OF, list(inbound_ids)):
            shown.setdefault(row[0], []).append(row[1])
        return shown

    async def forget_previews(self, inbound_ids: list[int]) -> None:
        await self._execute(q.FORGET_PREVIEWS, list(inbound_ids))

    async def undelivered(self, reply_row_ids: list[int]) -> set[int]:
        return {row[0] for row in await self.fetch(q.UNDELIVERED, list(reply_row_ids))}
