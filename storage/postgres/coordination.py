"""Leases and notices between gateway processes on PostgreSQL (storage/coordination.py).

A lease row is taken with one upsert that only succeeds when the row is free, expired or
already the caller's, so two processes can never both hold it; expiry is judged by the
database's clock, so the processes' clocks may disagree. Notices are LISTEN/NOTIFY on one
channel, carrying the chat key; the listening connection is held apart from the pool.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import asyncpg

from storage.coordination import Coordination
from storage.errors import StoreError

if TYPE_CHECKING:
    from storage.postgres.store import PostgresSessionStore

log = logging.getLogger(__name__)

CHANNEL = "threadline_chats"
_NOW = "extract(epoch from clock_timestamp())"
CLAIM = f"""INSERT INTO leases (name, holder, expires_at) VALUES ($1, $2, {_NOW} + $3)
    ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
    WHERE leases.holder = excluded.holder OR leases.expires_at < {_NOW}
    RETURNING holder"""
RENEW = f"UPDATE leases SET expires_at = {_NOW} + $2 WHERE holder = $1 RETURNING name"
RELEASE = "DELETE FROM leases WHERE name = $1 AND holder = $2"
# Chats with a pending or taken ledger row whose chat lease is missing or expired.
UNATTENDED = f"""SELECT DISTINCT i.chat_key FROM inbound AS i
    WHERE i.status IN ('pending', 'taken') AND NOT EXISTS (
        SELECT 1 FROM leases AS l WHERE l.name = 'chat:' || i.chat_key
        AND l.expires_at >= {_NOW})"""


class PostgresCoordination(Coordination):
    def __init__(self, store: PostgresSessionStore) -> None:
        self._store = store
        self._listener: asyncpg.Connection | None = None

    async def claim(self, name: str, holder: str, ttl: float) -> bool:
        found = await self._store.fetch(CLAIM, name, holder, ttl)
        return bool(found)

    async def renew(self, holder: str, ttl: float) -> set[str]:
        return {row[0] for row in await self._store.fetch(RENEW, holder, ttl)}

    async def release(self, name: str, holder: str) -> None:
        await self._store.fetch(RELEASE, name, holder)

    async def unattended_chats(self) -> list[str]:
        return [row[0] for row in await self._store.fetch(UNATTENDED)]

    async def notify(self, chat_key: str) -> None:
        await self._store.fetch("SELECT pg_notify($1, $2)", CHANNEL, chat_key)

    async def listen(self, callback: Callable[[str], None]) -> None:
        if self._listener is not None:
            raise StoreError("already listening")

        def heard(_con: Any, _pid: int, _channel: str, payload: str) -> None:
            callback(payload)
        try:
            self._listener = await asyncpg.connect(self._store.url)
            await self._listener.add_listener(CHANNEL, heard)
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            raise StoreError(f"{self._store.label}: cannot listen for notices: {exc}") from None

    async def close(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            try:
                await listener.close()
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                log.warning("closing the notice connection failed: %s", exc)
