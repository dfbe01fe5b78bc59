"""The shelf of files every process reads: attachments and saved tool outputs.

Each process keeps its files in a directory (its cache); with PostgreSQL the database also
keeps them, content-addressed by key under a namespace ("attachments", "tool_outputs"),
so a process that takes a chat over can fetch what another process kept. A file unused for
its namespace's retention period is removed, as the directories are swept
(docs/scale-out.md, "Shared files").
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from storage.postgres.store import PostgresSessionStore

log = logging.getLogger(__name__)

PUT = ("INSERT INTO files (key, data, used_at) VALUES ($1, $2, $3)"
       " ON CONFLICT (key) DO UPDATE SET used_at = excluded.used_at")
GET = "UPDATE files SET used_at = $2 WHERE key = $1 RETURNING data"
SWEEP = "DELETE FROM files WHERE starts_with(key, $1) AND used_at < $2 RETURNING 1"


class PostgresShelf:
    def __init__(self, store: PostgresSessionStore, namespace: str, retention_s: float) -> None:
        self.store, self.prefix, self.retention_s = store, f"{namespace}/", retention_s
        self._swept = False

    async def put(self, key: str, data: bytes) -> None:
        await self._sweep_once()
        await self.store.fetch(PUT, self.prefix + key, data, time.time())

    async def get(self, key: str) -> bytes | None:
        await self._sweep_once()
        found = await self.store.fetch(GET, self.prefix + key, time.time())
        return bytes(found[0][0]) if found else None

    async def _sweep_once(self) -> None:
        """Files past the retention period go, once per process (as the directories are
        swept at startup)."""
        if self._swept or self.retention_s <= 0:
            return
        self._swept = True
        gone = await self.store.fetch(SWEEP, self.prefix, time.time() - self.retention_s)
        if gone:
            log.info("removed %d shared %s file(s) past their retention", len(gone),
                     self.prefix.rstrip("/"))
