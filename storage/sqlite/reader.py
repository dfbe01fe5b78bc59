"""The store's reader thread: large reads and WAL checkpoints, off the event loop.

It has its own connection (WAL lets it read while the writer writes), made in the thread
the first time it is needed. See docs/architecture.md, "The store's writer".
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from storage.errors import StoreError

log = logging.getLogger(__name__)

T = TypeVar("T")

WAL_LIMIT_FRAMES = 2048  # pages (4 KiB each) the log may hold before it is emptied


def _passive(db: sqlite3.Connection) -> int:
    """Copy what it can without waiting; the frames the log holds."""
    _, log_frames, _ = db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    return int(log_frames)


def _truncate(db: sqlite3.Connection) -> None:
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()


class Reader:
    def __init__(self, path: str, connect: Callable[[], sqlite3.Connection],
                 error: Callable[[sqlite3.Error], StoreError]) -> None:
        self.path = path
        self._connect = connect
        self._error = error
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="store-read")
        self._local = threading.local()
        self._checkpointing: asyncio.Task[None] | None = None

    async def run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """`work` on the reader's connection, in its thread."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, self._run, work)

    def checkpoint(self, writes_open: asyncio.Event) -> None:
        """Copy the WAL back into the file, in the thread, one checkpoint at a time;
        nobody waits for it. PASSIVE first: it never holds the writer up, and between
        bursts the next write starts the log over. Under steady writing it never catches
        up, so once the log holds more than WAL_LIMIT_FRAMES a TRUNCATE follows, which
        needs a moment without a writer: `writes_open` is cleared while it runs, and the
        writer task waits for it before its next transaction (a TRUNCATE that had to
        find such a moment by itself lost to a busy writer every time)."""
        if self._checkpointing is not None:
            return
        self._checkpointing = asyncio.create_task(self._checkpoint(writes_open))
        self._checkpointing.add_done_callback(self._checkpointed)

    async def _checkpoint(self, writes_open: asyncio.Event) -> None:
        if await self.run(_passive) <= WAL_LIMIT_FRAMES:
            return
        writes_open.clear()
        try:
            await self.run(_truncate)
        finally:
            writes_open.set()

    async def close(self) -> None:
        if self._checkpointing is not None:  # let it finish: the writer may wait for it
            await asyncio.wait([self._checkpointing])
        await asyncio.get_running_loop().run_in_executor(self._executor, self._close_connection)
        self._executor.shutdown()

    def _run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        db = getattr(self._local, "db", None)
        if db is None:
            db = self._local.db = self._connect()
        try:
            return work(db)
        except sqlite3.Error as exc:
            raise self._error(exc) from exc

    def _close_connection(self) -> None:
        db = getattr(self._local, "db", None)
        if db is not None:
            self._local.db = None
            db.close()

    def _checkpointed(self, done: asyncio.Task[None]) -> None:
        self._checkpointing = None
        if not done.cancelled() and done.exception() is not None:
            log.warning("store %s: checkpoint failed: %s", self.path, done.exception())
