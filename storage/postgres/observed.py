"""The PostgreSQL store's room context: group messages kept while the bot was not
addressed (docs/groups.md, "Room context")."""

from __future__ import annotations

from typing import Any

from storage.models import ObservedMessage

_COLUMNS = "platform, chat_key, message_id, sender_id, sender_name, text, received_at"
OBSERVE = (f"INSERT INTO observed ({_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7)"
           " ON CONFLICT (platform, chat_key, message_id) DO NOTHING")
# See storage/sqlite/observed.py: each kept message falls between two ledger rows.
OBSERVED = (f"SELECT {_COLUMNS} FROM observed WHERE chat_key = $1 AND received_at < $3"
            " AND received_at > GREATEST($4, COALESCE((SELECT max(received_at) FROM inbound"
            " WHERE chat_key = $1 AND id < $2), 0))"
            " ORDER BY received_at DESC, id DESC LIMIT $5")


class ObservedRows:
    """Mixed into PostgresSessionStore, whose query helpers it uses."""

    fetch: Any  # PostgresSessionStore.fetch
    _execute: Any

    async def observe(self, message: ObservedMessage) -> None:
        m = message
        await self._execute(OBSERVE, m.platform, m.chat_key, m.message_id, m.sender_id,
                            m.sender_name, m.text, m.received_at)

    async def observed(self, chat_key: str, first_inbound: int, until: float, since: float,
                       limit: int) -> list[ObservedMessage]:
        found = await self.fetch(OBSERVED, chat_key, first_inbound, until, since, limit)
        return [ObservedMessage(*row.values()) for row in found]
