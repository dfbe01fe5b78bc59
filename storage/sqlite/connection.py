"""The store's one connection: opening and migrating, the lock, transactions, retries.

Every coroutine shares one aiosqlite connection; the lock keeps one coroutine's open
transaction (and its uncommitted rows) from interleaving with another's statements.
Writes run in BEGIN IMMEDIATE transactions (a single statement is its own), retried
while another process holds the file, and shielded so a cancelled caller never cuts one
short. Every sqlite3 error leaves here as a StoreError naming the file.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite

from storage.errors import StoreError
from storage.sqlite import integrity, schema
from storage.sqlite import queries as q

log = logging.getLogger(__name__)

T = TypeVar("T")
Db = aiosqlite.Connection
Work = Callable[[Db], Awaitable[T]]

_SQLITE_BUSY, _SQLITE_LOCKED = 5, 6


class SqliteConnection:
    def __init__(self, path: str | os.PathLike[str], *, busy_timeout_ms: int = 5000,
                 lock_retries: int = 5) -> None:
        self.path = str(path)
        self.busy_timeout_ms = busy_timeout_ms
        self._lock_retries = lock_retries
        self._db: Db | None = None
        self._lock = asyncio.Lock()

    async def open(self) -> None:
        """Create the directory, open, set the pragmas and migrate; StoreError names the path."""
        if self._db is not None:
            return
        if self.path != ":memory:":
            try:
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                reason = (f"{exc.filename} is not a directory"
                          if isinstance(exc, FileExistsError) else exc.strerror or str(exc))
                raise StoreError(f"cannot create the directory for database {self.path}: "
                                 f"{reason}") from exc
        try:
            # A path that cannot be opened fails here, in a plain thread: aiosqlite's own
            # worker thread, when its connect fails, outlives the call and may report to a
            # closed event loop, printing a traceback after the one-line error.
            await asyncio.to_thread(_open_and_close, self.path)
            db = await aiosqlite.connect(self.path, isolation_level=None)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open database {self.path}: {exc}") from exc
        try:
            await schema.configure(db, self.busy_timeout_ms)
            await schema.migrate(db, self.path)
        except BaseException as exc:
            await db.close()
            if isinstance(exc, sqlite3.DatabaseError) and _is_damage(exc):
                raise StoreError(integrity.damaged(self.path, str(exc))) from exc
            if isinstance(exc, sqlite3.Error):
                raise StoreError(f"cannot open database {self.path}: {exc}") from exc
            raise
        self._db = db

    async def close(self) -> None:
        async with self._lock:  # a running transaction finishes first
            db, self._db = self._db, None
            if db is None:
                return
            try:
                await schema.optimize(db)
            except sqlite3.Error:
                log.debug("PRAGMA optimize failed on %s", self.path, exc_info=True)
            await db.close()

    def plain(self) -> sqlite3.Connection:
        """A separate blocking connection to the same file, for a worker thread."""
        return sqlite3.connect(self.path, timeout=self.busy_timeout_ms / 1000)

    async def read(self, work: Work[T]) -> T:
        async with self._lock:
            db = self._connection()
            try:
                return await work(db)
            except sqlite3.Error as exc:
                raise StoreError(f"store {self.path}: {exc}") from exc

    async def write(self, work: Work[T], single: bool = False) -> T:
        """Run `work` in one BEGIN IMMEDIATE transaction, retrying while the file is busy.

        Shielded: a cancelled caller (/stop, shutdown) does not cut the transaction short;
        it still commits or rolls back as a whole before the next one starts.
        """
        return await asyncio.shield(self._write_now(work, single))

    async def write_statement(self, sql: str, params: Any) -> Any:
        """One statement is its own transaction: no BEGIN/COMMIT round trips around it.

        Returns its first row (for RETURNING), or None.
        """
        return await self.write(lambda db: q.fetch_one(db, sql, params), single=True)

    async def _write_now(self, work: Work[T], single: bool = False) -> T:
        async with self._lock:
            db = self._connection()
            for attempt in range(1, self._lock_retries + 1):
                try:
                    return await (work(db) if single else _transaction(db, work))
                except sqlite3.OperationalError as exc:
                    if not _is_busy(exc) or attempt == self._lock_retries:
                        raise StoreError(f"store {self.path}: {exc}") from exc
                    log.warning("store %s is busy (attempt %d): retrying", self.path, attempt)
                    await asyncio.sleep(0.05 * attempt)
                except sqlite3.Error as exc:
                    raise StoreError(f"store {self.path}: {exc}") from exc
            raise StoreError(f"store {self.path}: no write attempt was made")

    def _connection(self) -> Db:
        if self._db is None:
            raise StoreError(f"store {self.path} is not open: call initialize() first")
        return self._db


async def _transaction(db: Db, work: Work[T]) -> T:
    await db.execute("BEGIN IMMEDIATE")
    try:
        result = await work(db)
        await db.execute("COMMIT")
        return result
    except BaseException:
        if db.in_transaction:
            try:
                await db.rollback()
            except sqlite3.Error:
                log.exception("rollback failed")
        raise


def _is_damage(exc: sqlite3.DatabaseError) -> bool:
    text = str(exc).lower()
    return "not a database" in text or "malformed" in text or "corrupt" in text


def _open_and_close(path: str) -> None:
    sqlite3.connect(path).close()


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
    return code in (_SQLITE_BUSY, _SQLITE_LOCKED) or "database is locked" in str(exc)
