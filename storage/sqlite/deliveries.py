"""The SQLite store's delivery rows: each reply part's state, the previews a streamed
reply was shown in, and chats that moved (docs/architecture.md, "Sending")."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from storage import rows
from storage.models import Delivery, OutChunk
from storage.sqlite import queries as q

if TYPE_CHECKING:
    from storage.live import LiveSessions
    from storage.sqlite.connection import Db, SqliteConnection


class DeliveryRows:
    """Mixed into SqliteSessionStore, whose connection (`_conn`) and helpers it uses."""

    _conn: SqliteConnection
    _live: LiveSessions
    _read: Any  # SqliteConnection.read
    _write_statement: Any  # SqliteConnection.write_statement

    async def deliveries(self, inbound_id: int) -> list[Delivery]:
        return await self._read(
            lambda db: q.fetch_all(db, q.DELIVERIES_OF, (inbound_id,), rows.delivery))

    async def mark_delivered(self, inbound_id: int, chunk: int,
                             platform_message_id: str | None, *, failed: bool = False) -> None:
        params = ("failed" if failed else "sent", platform_message_id, time.time(),
                  inbound_id, chunk)
        await self._write_statement(q.MARK_DELIVERED, params)

    async def mark_sending(self, inbound_id: int, chunk: int) -> bool:
        return await self._write_statement(q.SENDING, (inbound_id, chunk)) is not None

    async def mark_not_sent(self, inbound_id: int, chunk: int) -> None:
        await self._write_statement(q.NOT_SENT, (inbound_id, chunk))

    async def move_chat(self, platform: str, old_chat_id: str, new_chat_id: str) -> None:
        def work(db: Db) -> None:
            q.move_chat(db, platform, old_chat_id, new_chat_id, time.time())
        await self._conn.submit(work, write=True)
        self._live.clear()  # keyed by chat: the moved one is under another key now

    async def chat_moves(self) -> dict[tuple[str, str], str]:
        found = await self._read(lambda db: q.fetch_all(db, q.CHAT_MOVES, (), tuple))
        return {(platform, old): new for platform, old, new in found}

    async def record_notice(self, inbound_id: int, chunks: Sequence[OutChunk]) -> None:
        def work(db: Db) -> None:
            if not db.execute(q.ANY_DELIVERY, (inbound_id,)).fetchone():
                q.insert_delivery(db, inbound_id, None, chunks)
        await self._conn.submit(work, write=True)

    async def record_preview(self, inbound_id: int, position: int, message_id: str) -> None:
        await self._write_statement(q.ADD_PREVIEW, (inbound_id, position, message_id))

    async def previews(self, inbound_ids: list[int]) -> dict[int, list[str]]:
        ids = json.dumps(list(inbound_ids))
        found = await self._read(lambda db: q.fetch_all(db, q.PREVIEWS_OF, (ids,), tuple))
        shown: dict[int, list[str]] = {}
        for inbound_id, message_id in found:
            shown.setdefault(inbound_id, []).append(message_id)
        return shown

    async def forget_previews(self, inbound_ids: list[int]) -> None:
        await self._write_statement(q.FORGET_PREVIEWS, (json.dumps(list(inbound_ids)),))

    async def undelivered(self, reply_row_ids: list[int]) -> set[int]:
        ids = json.dumps(list(reply_row_ids))
        found = await self._read(lambda db: q.fetch_all(db, q.UNDELIVERED, (ids,),
                                                        lambda row: row[0]))
        return set(found)
