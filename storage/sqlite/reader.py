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


def _checkpoint(db: sqlite3.Connection) -> None:
    _, log_frames, _ = db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    if log_frames > WAL_LIMIT_FRAMES:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()


class Reader:
    def __init__(self, path: str, connect: Callable[[], sqlite3.Connection],
                 error: Callable[[sqlite3.Error], StoreError]) -> None:
        self.path = path
        self._connect = connect
        self._error = error
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="store-read")
        self._local = threading.local()
        self._checkpointing = False

    async def run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """`work` on the reader's connection, in its thread."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, self._run, work)

    def checkpoint(self) -> None:
        """Copy the WAL back into the file, in the thread, one checkpoint at a time;
        nobody waits for it. PASSIVE first: it never holds the writer up, and between
        bursts the next write starts the log over. Under steady writing it never catches
        up, so once the log holds more than WAL_LIMIT_FRAMES a TRUNCATE follows: it holds
        the writer off (which waits asleep, on the loop) while it copies the little the
        PASSIVE one left, and empties the log."""
        if self._checkpointing:
            return
        self._checkpointing = True
        done = asyncio.get_running_loop().run_in_executor(
            self._executor, self._run, _checkpoint)
        done.add_done_callback(self._checkpointed)

    async def close(self) -> None:
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

    def _checkpointed(self, done: asyncio.Future[object]) -> None:
        self._checkpointing = False
        if not done.cancelled() and done.exception() is not None:
            log.warning("store %s: checkpoint failed: %s", self.path, done.exception())
