"""The SQLite store on a disk that fills up: a write that finds no room is StoreUnavailable
(nothing was done, the same call works once space is freed), reads go on, and other
failures stay plain StoreErrors."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from storage.errors import StoreError, StoreUnavailable
from storage.sqlite import SqliteSessionStore
from storage.sqlite.faults import SQLITE_IOERR, store_error
from tests.harness.small_disk import SmallDisk, small_disk
from tests.harness.store import CHAT, msg, raw, root


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[SmallDisk]:
    with small_disk(tmp_path / "disk", size_mb=2) as mounted:
        yield mounted


@pytest.fixture
async def store(disk: SmallDisk) -> AsyncIterator[SqliteSessionStore]:
    async with SqliteSessionStore(disk.path / "threadline.db") as opened:
        yield opened


async def ingest(store: SqliteSessionStore, message_id: str) -> int:
    record = await store.ingest(platform="telegram", chat_id="42", message_id=message_id,
                                chat_key=CHAT, text=f"text {message_id} " + "x" * 2000,
                                sender_id="7", sender_name="Ann")
    assert record is not None
    return record.id


async def test_writes_on_a_full_disk_are_unavailable_change_nothing_and_work_once_freed(
        store: SqliteSessionStore, disk: SmallDisk) -> None:
    session = await root(store)
    first = await ingest(store, "1")
    disk.fill()
    failures = await asyncio.gather(*(ingest(store, str(n)) for n in range(2, 8)),
                                    store.append_messages(session.id, [msg("user", "hi")]),
                                    return_exceptions=True)
    for failure in failures:  # queued together, they failed together, each one the same way
        assert isinstance(failure, StoreUnavailable), failure
        assert f"the disk holding {disk.path} is full" in str(failure)
        assert isinstance(failure.__cause__, sqlite3.OperationalError)
    # Reading goes on: the ledger says what is still open, on the loop and in the thread.
    assert [r.id for r in await store.open_inbound()] == [first]
    assert [s.id for s in await store.chain(session.id)] == [session.id]
    history = await store.load_history(session.id)
    assert [m.message["role"] for m in history] == ["system"]
    disk.free()
    later = await ingest(store, "2")  # the same call, now that there is room
    with raw(store) as db:
        rows = db.execute("SELECT id, message_id FROM inbound ORDER BY id").fetchall()
    assert rows == [(first, "1"), (later, "2")]


def test_an_io_error_counts_as_a_full_disk_only_when_the_disk_has_no_room(
        disk: SmallDisk) -> None:
    path = str(disk.path / "threadline.db")
    io_error = sqlite3.OperationalError("disk I/O error")
    io_error.sqlite_errorcode = SQLITE_IOERR | (3 << 8)  # type: ignore[attr-defined]
    assert type(store_error(path, io_error)) is StoreError  # room left: a real I/O fault
    disk.fill()
    full = store_error(path, io_error)
    assert isinstance(full, StoreUnavailable)
    assert str(full).startswith(f"store {path}: the disk holding {disk.path} is full")


def test_failures_that_space_does_not_cure_stay_plain_store_errors(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "plain.db")
    db.execute("CREATE TABLE t (x UNIQUE)")
    db.execute("INSERT INTO t VALUES (1)")
    for statement in ("INSERT INTO t VALUES (1)", "SELECT nothing FROM t", "INSERT INTO u"):
        with pytest.raises(sqlite3.Error) as caught:
            db.execute(statement)
        error = store_error(str(tmp_path / "plain.db"), caught.value)
        assert type(error) is StoreError and error.__cause__ is caught.value
    db.close()
