"""The store's one connection, owned by one thread that is also the single writer.

The event loop hands the thread whole units of work (a store call is one function over
the connection), so a call costs one trip to the thread however many statements it runs.
The thread takes everything that queued while it was busy and runs it in order; from the
first write on, the batch is ONE transaction, each write in its own savepoint, so one
failing call rolls back alone while the others commit together (group commit). A caller hears
of its write only after that COMMIT: a reply is never sent for a turn that is not on
disk. A cancelled caller does not cut its work short: it runs, whole, or not at all.
See docs/architecture.md, "The store's thread".
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from storage.errors import StoreError
from storage.sqlite import integrity, schema

log = logging.getLogger(__name__)

T = TypeVar("T")
Db = sqlite3.Connection
Work = Callable[[Db], T]

_SQLITE_BUSY, _SQLITE_LOCKED = 5, 6
MAX_BATCH = 256  # calls committed together at most; the rest wait for the next batch


@dataclass(eq=False)
class _Job:
    work: Callable[[Db], Any]
    write: bool
    future: asyncio.Future[Any]
    result: Any = None
    error: BaseException | None = None


@dataclass
class StoreStats:
    """What the store's thread has done: calls (trips to it), batches and commits."""

    calls: int = 0
    batches: int = 0
    commits: int = 0
    committed_writes: int = 0
    largest_group: int = 0
    by_kind: dict[str, int] = field(default_factory=lambda: {"read": 0, "write": 0})


class SqliteConnection:
    def __init__(self, path: str | os.PathLike[str], *, busy_timeout_ms: int = 5000,
                 lock_retries: int = 5) -> None:
        self.path = str(path)
        self.busy_timeout_ms = busy_timeout_ms
        self._lock_retries = lock_retries
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._closed: asyncio.Future[None] | None = None
        self.stats = StoreStats()

    async def open(self) -> None:
        """Create the directory, open, set the pragmas and migrate; StoreError names the path."""
        if self._thread is not None:
            return
        if self.path != ":memory:":
            try:
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                reason = (f"{exc.filename} is not a directory"
                          if isinstance(exc, FileExistsError) else exc.strerror or str(exc))
                raise StoreError(f"cannot create the directory for database {self.path}: "
                                 f"{reason}") from exc
        db = await asyncio.to_thread(self._connect)
        self._closed = asyncio.get_running_loop().create_future()
        self._thread = threading.Thread(target=self._serve, args=(db, self._closed),
                                        name=f"store {Path(self.path).name}", daemon=True)
        self._thread.start()

    def _connect(self) -> Db:
        try:
            db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open database {self.path}: {exc}") from exc
        try:
            schema.configure(db, self.busy_timeout_ms)
            schema.migrate(db, self.path)
        except BaseException as exc:
            db.close()
            if isinstance(exc, sqlite3.DatabaseError) and _is_damage(exc):
                raise StoreError(integrity.damaged(self.path, str(exc))) from exc
            if isinstance(exc, sqlite3.Error):
                raise StoreError(f"cannot open database {self.path}: {exc}") from exc
            raise
        return db

    async def close(self) -> None:
        """Finish every call already handed over, optimize, close; the thread ends."""
        thread, closed = self._thread, self._closed
        if thread is None or closed is None:
            return
        self._thread = None
        self._jobs.put(None)
        await asyncio.shield(closed)

    def plain(self) -> sqlite3.Connection:
        """A separate blocking connection to the same file, for a worker thread."""
        return sqlite3.connect(self.path, timeout=self.busy_timeout_ms / 1000)

    async def read(self, work: Work[T]) -> T:
        """Run `work` on the thread, outside any transaction (WAL: a consistent snapshot)."""
        return await self._submit(work, write=False)

    async def write(self, work: Work[T], single: bool = False) -> T:
        """Run `work` in a transaction (shared with other calls queued at the same time).

        Shielded: a cancelled caller (/stop, shutdown) does not cut it short. `single` is
        kept for callers that run one statement; it is a write like any other.
        """
        return await asyncio.shield(self._submit(work, write=True))

    async def write_statement(self, sql: str, params: Any) -> Any:
        """One statement as a write; returns its first row (for RETURNING), or None."""
        return await self.write(lambda db: db.execute(sql, params).fetchone())

    def submit(self, work: Callable[[Db], Any], *, write: bool) -> asyncio.Future[Any]:
        """Hand `work` to the thread; the future is settled after it ran (and committed)."""
        return self._submit(work, write=write)

    def _submit(self, work: Callable[[Db], Any], *, write: bool) -> asyncio.Future[Any]:
        if self._thread is None:
            raise StoreError(f"store {self.path} is not open: call initialize() first")
        future = asyncio.get_running_loop().create_future()
        self._jobs.put(_Job(work, write, future))
        return future

    # --- the thread --------------------------------------------------------------------
    def _serve(self, db: Db, closed: asyncio.Future[None]) -> None:
        stop = False
        while not stop:
            batch: list[_Job] = []
            job = self._jobs.get()
            while job is not None:
                batch.append(job)
                if len(batch) >= MAX_BATCH:
                    break
                try:
                    job = self._jobs.get_nowait()
                except queue.Empty:
                    break
            stop = job is None
            self._run_batch(db, batch)
        try:
            schema.optimize(db)
        except sqlite3.Error:
            log.debug("PRAGMA optimize failed on %s", self.path, exc_info=True)
        db.close()
        try:
            closed.get_loop().call_soon_threadsafe(_resolve, closed)
        except RuntimeError:  # the loop that opened the store is gone
            log.debug("store %s closed after its event loop", self.path)

    def _run_batch(self, db: Db, batch: list[_Job]) -> None:
        stats = self.stats
        stats.calls += len(batch)
        stats.batches += 1
        first_write = next((i for i, job in enumerate(batch) if job.write), len(batch))
        for job in batch[:first_write]:
            self._read_now(db, job)
        group = batch[first_write:]
        if group:
            try:
                self._commit_group(db, group)
            except sqlite3.Error as exc:  # a savepoint or rollback itself failed
                _rollback(db)
                self._fail_writes(db, group, exc)
        writes = sum(job.write for job in batch)
        stats.by_kind["write"] += writes
        stats.by_kind["read"] += len(batch) - writes
        by_loop: dict[asyncio.AbstractEventLoop, list[_Job]] = {}
        for job in batch:
            by_loop.setdefault(job.future.get_loop(), []).append(job)
        for loop, jobs in by_loop.items():
            try:
                loop.call_soon_threadsafe(_settle, jobs)
            except RuntimeError:  # that loop is closed: nobody is waiting any more
                log.debug("store %s: a caller's event loop closed before its answer", self.path)

    def _read_now(self, db: Db, job: _Job) -> None:
        job.result, job.error = None, None
        try:
            job.result = job.work(db)
        except sqlite3.Error as exc:
            job.error = self._error(exc)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller as it is
            job.error = exc

    def _commit_group(self, db: Db, jobs: list[_Job]) -> None:
        """The jobs, in the order they came, in one transaction: reads among them see the
        writes before them, as they would have one call at a time, and are answered only
        after the COMMIT. Retried whole while another process holds the file; a job whose
        error lost the whole transaction fails alone and the others run again."""
        pending = list(jobs)
        attempt = 0
        while pending:
            attempt += 1
            try:
                db.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                if _is_busy(exc) and attempt < self._lock_retries:
                    log.warning("store %s is busy (attempt %d): retrying", self.path, attempt)
                    time.sleep(0.05 * attempt)
                    continue
                return self._fail_writes(db, pending, exc)
            except sqlite3.Error as exc:
                return self._fail_writes(db, pending, exc)
            lost = self._run_in_savepoints(db, pending)
            if lost is not None:  # SQLite rolled the transaction back: run the rest again
                pending = [job for job in pending if job is not lost]
                continue
            try:
                db.execute("COMMIT")
            except sqlite3.Error as exc:
                _rollback(db)
                if isinstance(exc, sqlite3.OperationalError) and _is_busy(exc) \
                        and attempt < self._lock_retries:
                    time.sleep(0.05 * attempt)
                    continue
                return self._fail_writes(db, pending, exc)
            writes = sum(job.write for job in pending)
            self.stats.commits += 1
            self.stats.committed_writes += writes
            self.stats.largest_group = max(self.stats.largest_group, writes)
            return None
        return None

    def _run_in_savepoints(self, db: Db, jobs: list[_Job]) -> _Job | None:
        """Run each write in its savepoint (reads as they are); the job whose failure
        ended the whole transaction, if one did."""
        for job in jobs:
            if not job.write:
                self._read_now(db, job)
                if not db.in_transaction:
                    return job
                continue
            job.result, job.error = None, None
            db.execute("SAVEPOINT call")
            try:
                job.result = job.work(db)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                job.error = self._error(exc) if isinstance(exc, sqlite3.Error) else exc
                if not db.in_transaction:
                    return job
                db.execute("ROLLBACK TO call")
            db.execute("RELEASE call")
        return None

    def _fail_writes(self, db: Db, jobs: list[_Job], exc: sqlite3.Error) -> None:
        """The writes fail; reads among them run again, seeing none of those writes."""
        error = self._error(exc)
        for job in jobs:
            if job.write:
                job.result, job.error = None, error
            else:
                self._read_now(db, job)

    def _error(self, exc: sqlite3.Error) -> StoreError:
        store_error = StoreError(f"store {self.path}: {exc}")
        store_error.__cause__ = exc
        return store_error


def _settle(jobs: list[_Job]) -> None:
    for job in jobs:
        if job.future.done():  # its caller was cancelled; the work ran all the same
            continue
        if job.error is not None:
            job.future.set_exception(job.error)
        else:
            job.future.set_result(job.result)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _rollback(db: Db) -> None:
    if db.in_transaction:
        try:
            db.execute("ROLLBACK")
        except sqlite3.Error:
            log.exception("rollback failed")


def _is_damage(exc: sqlite3.DatabaseError) -> bool:
    text = str(exc).lower()
    return "not a database" in text or "malformed" in text or "corrupt" in text


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
    return code in (_SQLITE_BUSY, _SQLITE_LOCKED) or "database is locked" in str(exc)
