"""The SQLite store's room context: group messages kept while the bot was not addressed
(docs/groups.md, "Room context")."""

from __future__ import annotations

from typing import Any

from storage.models import ObservedMessage

_COLUMNS = "platform, chat_key, message_id, sender_id, sender_name, text, received_at"
OBSERVE = (f"INSERT INTO observed ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)"
           " ON CONFLICT (platform, chat_key, message_id) DO NOTHING RETURNING id")
# After the chat's ledger row before a turn's first row, and before its last row: each
# kept message falls in one such span, so it is shown with one mention, never twice.
OBSERVED = (f"SELECT {_COLUMNS} FROM observed WHERE chat_key = ?1 AND received_at < ?3"
            " AND received_at > max(?4, coalesce((SELECT max(received_at) FROM inbound"
            " WHERE chat_key = ?1 AND id < ?2), 0))"
            " ORDER BY received_at DESC, id DESC LIMIT ?5")


class ObservedRows:
    """Mixed into SqliteSessionStore, whose connection helpers it uses."""

    _read: Any  # SqliteConnection.read
    _write_statement: Any  # SqliteConnection.write_statement

    async def observe(self, message: ObservedMessage) -> None:
        m = message
        await self._write_statement(OBSERVE, (m.platform, m.chat_key, m.message_id,
                                              m.sender_id, m.sender_name, m.text,
                                              m.received_at))

    async def observed(self, chat_key: str, first_inbound: int, until: float, since: float,
                       limit: int) -> list[ObservedMessage]:
        def read(db: Any) -> list[ObservedMessage]:
            found = db.execute(OBSERVED, (chat_key, first_inbound, until, since, limit))
            return [ObservedMessage(*row) for row in found.fetchall()]
        return await self._read(read)
