"""The store's connection, driven by one task on the event loop: the single writer.

Store calls queue up for that task; it takes everything that queued meanwhile and runs it
in order, synchronously, on the loop's own thread (a statement costs microseconds; a hop
to a worker thread costs more, and two threads fight over the GIL). From the first write
on, a batch is ONE transaction, each write in its own savepoint, so one failing call rolls
back alone while the others commit together (group commit). A caller hears of its write
only after that COMMIT: a reply is never sent for a turn that is not on disk. A cancelled
caller does not cut its work short: it runs, whole, or not at all.

Nothing here blocks the loop for long: waiting for another process's lock is an
asyncio sleep (busy_timeout is 0 on this connection), WAL checkpoints (the fsync) run
in the reader thread, and so do large reads (`heavy`), on their own connection.
See docs/architecture.md, "The store's writer".
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from storage import owner_only
from storage.errors import StoreError
from storage.sqlite import opening, schema
from storage.sqlite.faults import store_error
from storage.sqlite.reader import Reader

log = logging.getLogger(__name__)

T = TypeVar("T")
Db = sqlite3.Connection
Work = Callable[[Db], T]

_SQLITE_BUSY, _SQLITE_LOCKED = 5, 6
MAX_BATCH = 256  # calls committed together at most; the rest wait for the next batch
CHECKPOINT_EVERY = 256  # commits between two WAL checkpoints


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
                 lock_retries: int = 5, access: opening.Access = "upgrade") -> None:
        self.path = str(path)
        self.access = access
        self.busy_timeout_ms = busy_timeout_ms
        self._lock_retries = lock_retries
        self._db: Db | None = None
        self._jobs: deque[_Job] = deque()
        self._wake: asyncio.Event | None = None
        self._writer: asyncio.Task[None] | None = None
        self._reader: Reader | None = None
        self._cancelled = False  # the writer was cancelled: the process is leaving
        self.stats = StoreStats()

    async def open(self) -> None:
        """Open in the connection's way (storage/sqlite/opening.py): for `upgrade`, create
        the directory, set the pragmas and migrate; StoreError names the path."""
        if self._db is not None:
            return
        if problem := opening.missing(self.path, self.access):
            raise StoreError(problem)
        if self.path != ":memory:" and self.access == "upgrade":
            try:
                owner_only.make_dirs(Path(self.path).parent)
            except OSError as exc:
                reason = (f"{exc.filename} is not a directory"
                          if isinstance(exc, FileExistsError) else exc.strerror or str(exc))
                raise StoreError(f"cannot create the directory for database {self.path}: "
                                 f"{reason}") from exc
        self._db = await asyncio.to_thread(self._connect)
        self._reader = Reader(self.path, self.plain, self._error)
        self._wake = asyncio.Event()
        self._writes_open = asyncio.Event()  # cleared while a TRUNCATE checkpoint runs
        self._writes_open.set()
        self._writer = asyncio.create_task(self._serve(), name=f"store {self.path}")

    def _connect(self) -> Db:
        db = opening.connect(self.path, self.access, self.busy_timeout_ms)
        if self.access not in opening.READ_ONLY:
            # On the loop's connection a lock is waited for by sleeping, not by blocking,
            # and checkpoints (which fsync) are left to the reader thread.
            db.execute("PRAGMA busy_timeout = 0")
            db.execute("PRAGMA wal_autocheckpoint = 0")
        return db

    async def close(self) -> None:
        """Finish every call already queued, checkpoint, optimize and close."""
        db, writer, reader = self._db, self._writer, self._reader
        if db is None or writer is None or reader is None:
            return
        self._writer = None
        self._wake_writer()
        if not writer.done():
            await asyncio.wait([writer])
        self._db = None
        try:
            if self.access not in opening.READ_ONLY:
                schema.optimize(db)
        except sqlite3.Error:
            log.debug("PRAGMA optimize failed on %s", self.path, exc_info=True)
        await reader.close()
        db.close()  # the last connection to close checkpoints the WAL into the file

    def plain(self) -> sqlite3.Connection:
        """A separate blocking connection to the same file, for a worker thread."""
        return opening.plain(self.path, self.access, self.busy_timeout_ms / 1000)

    async def read(self, work: Work[T], *, heavy: bool = False) -> T:
        """Run `work` outside any transaction, after every call queued before it.

        `heavy` reads (whole histories, searches, sums over many rows) run in the reader
        thread on their own connection, so they never hold up the loop.
        """
        if not heavy or self.path == ":memory:":  # a second connection would see another db
            return await self.submit(work, write=False)
        await self.submit(_nothing, write=False)  # what was queued before is done
        assert self._reader is not None
        return await self._reader.run(work)

    async def write(self, work: Work[T]) -> T:
        """Run `work` in a transaction (shared with other calls queued at the same time).

        Shielded: a cancelled caller (/stop, shutdown) does not cut it short.
        """
        return await asyncio.shield(self.submit(work, write=True))

    async def write_statement(self, sql: str, params: Any) -> Any:
        """One statement as a write; returns its first row (for RETURNING), or None."""
        return await self.write(lambda db: db.execute(sql, params).fetchone())

    def submit(self, work: Callable[[Db], Any], *, write: bool) -> asyncio.Future[Any]:
        """Queue `work`; the future is settled after it ran (and committed)."""
        if self._writer is None or self._db is None:
            raise StoreError(f"store {self.path} is not open: call initialize() first")
        job = _Job(work, write, asyncio.get_running_loop().create_future())
        if self._cancelled:  # no writer any more (the process is leaving): run it now
            self._finish_now(self._db, [job])
        else:
            self._jobs.append(job)
            self._wake_writer()
        return job.future

    def _wake_writer(self) -> None:
        if self._wake is not None:
            self._wake.set()

    # --- the writer task ---------------------------------------------------------------
    async def _serve(self) -> None:
        assert self._wake is not None and self._db is not None
        db, jobs, wake = self._db, self._jobs, self._wake
        batch: list[_Job] = []
        try:
            while True:
                if not jobs:
                    if self._writer is None:
                        return  # closing, and nothing is left
                    wake.clear()
                    await wake.wait()
                    continue
                if not self._writes_open.is_set():  # a TRUNCATE checkpoint is running
                    await self._writes_open.wait()
                batch = [jobs.popleft() for _ in range(min(len(jobs), MAX_BATCH))]
                try:
                    await self._run_batch(db, batch)
                except Exception as exc:  # noqa: BLE001 - never let the writer die
                    log.exception("store %s: a batch failed unexpectedly", self.path)
                    for job in batch:
                        if job.error is None and not job.future.done():
                            job.error = exc
                _settle(batch)
                batch = []
                await asyncio.sleep(0)  # let the answered callers run before the next batch
        except asyncio.CancelledError:
            # The process is leaving without a clean close (a second stop signal): what
            # was handed over still runs, once, and every caller hears how it went; later
            # calls run at once (`_submit`), so shutdown can still say it stopped.
            self._cancelled = True
            self._finish_now(db, [*batch, *jobs])
            jobs.clear()
            raise

    def _finish_now(self, db: Db, jobs: list[_Job]) -> None:
        """Run `jobs` at once, without waiting for another process's lock, and answer."""
        for job in jobs:
            job.result, job.error = None, None
        first_write = next((i for i, job in enumerate(jobs) if job.write), len(jobs))
        for job in jobs[:first_write]:
            self._read_now(db, job)
        group = jobs[first_write:]
        try:
            _rollback(db)
            if group:
                db.execute("BEGIN IMMEDIATE")
                if self._run_in_savepoints(db, group) is not None:
                    raise sqlite3.OperationalError("the transaction was rolled back")
                db.execute("COMMIT")
        except sqlite3.Error as exc:
            _rollback(db)
            self._fail_writes(db, group, exc)
        _settle(jobs)

    async def _run_batch(self, db: Db, batch: list[_Job]) -> None:
        stats = self.stats
        stats.calls += len(batch)
        stats.batches += 1
        first_write = next((i for i, job in enumerate(batch) if job.write), len(batch))
        for job in batch[:first_write]:
            self._read_now(db, job)
        group = batch[first_write:]
        if group:
            try:
                await self._commit_group(db, group)
            except sqlite3.Error as exc:  # a savepoint or rollback itself failed
                _rollback(db)
                self._fail_writes(db, group, exc)
            self._maybe_checkpoint()
        writes = sum(job.write for job in batch)
        stats.by_kind["write"] += writes
        stats.by_kind["read"] += len(batch) - writes

    def _read_now(self, db: Db, job: _Job) -> None:
        job.result, job.error = None, None
        try:
            job.result = job.work(db)
        except sqlite3.Error as exc:
            job.error = self._error(exc)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller as it is
            job.error = exc

    async def _begin(self, db: Db) -> None:
        """BEGIN IMMEDIATE, sleeping (not blocking) while another process holds the file:
        up to busy_timeout_ms per attempt, `lock_retries` attempts."""
        for attempt in range(1, self._lock_retries + 1):
            deadline = time.monotonic() + self.busy_timeout_ms / 1000
            pause = 0.001
            while True:
                try:
                    db.execute("BEGIN IMMEDIATE")
                    return
                except sqlite3.OperationalError as exc:
                    if not _is_busy(exc):
                        raise
                    if time.monotonic() >= deadline:
                        if attempt == self._lock_retries:
                            raise
                        log.warning("store %s is busy (attempt %d): retrying",
                                    self.path, attempt)
                        break
                await asyncio.sleep(pause)
                pause = min(pause * 2, 0.05)

    async def _commit_group(self, db: Db, jobs: list[_Job]) -> None:
        """The jobs, in the order they came, in one transaction: reads among them see the
        writes before them, as they would have one call at a time, and are answered only
        after the COMMIT. A job whose error lost the whole transaction fails alone and
        the others run again."""
        pending = list(jobs)
        while pending:
            try:
                await self._begin(db)
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

    def _maybe_checkpoint(self) -> None:
        """Every CHECKPOINT_EVERY commits, a WAL checkpoint in the reader thread."""
        if self.stats.commits % CHECKPOINT_EVERY == 0 and self._reader is not None \
                and self.path != ":memory:":
            self._reader.checkpoint(self._writes_open)

    def _error(self, exc: sqlite3.Error) -> StoreError:
        """StoreUnavailable when the write found no room (it waits), else StoreError."""
        return store_error(self.path, exc)


def _settle(jobs: list[_Job]) -> None:
    for job in jobs:
        if job.future.done():  # its caller was cancelled; the work ran all the same
            continue
        if job.error is not None:
            job.future.set_exception(job.error)
        else:
            job.future.set_result(job.result)


def _nothing(db: Db) -> None:
    return None


def _rollback(db: Db) -> None:
    if db.in_transaction:
        try:
            db.execute("ROLLBACK")
        except sqlite3.Error:
            log.exception("rollback failed")


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
    return code in (_SQLITE_BUSY, _SQLITE_LOCKED) or "database is locked" in str(exc)
