"""The store's single writer: group commit, one failing call rolling back alone, and the
live-session map kept exact by our own writes and corrected after another process's."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from storage.errors import ContinuationConflict, StoreError
from storage.live import LiveSessions
from storage.models import SessionRecord
from storage.sqlite import SqliteSessionStore
from storage.sqlite.connection import CHECKPOINT_EVERY
from storage.sqlite.reader import WAL_LIMIT_FRAMES
from tests.harness.store import CHAT, compacted_turn, msg, raw, root


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteSessionStore]:
    async with SqliteSessionStore(tmp_path / "threadline.db") as opened:
        yield opened


async def _inbound(store: SqliteSessionStore, message_id: str) -> int:
    record = await store.ingest(platform="telegram", chat_id="42", message_id=message_id,
                                chat_key=CHAT, text=f"text {message_id}", sender_id="7",
                                sender_name="Ann")
    assert record is not None
    return record.id


def _size(path: str) -> int:
    return os.path.getsize(path)


def _contents(store: SqliteSessionStore, session_id: str) -> list[str]:
    with raw(store) as db:
        return [row[0] for row in db.execute(
            "SELECT content FROM messages WHERE session_id = ? ORDER BY seq", (session_id,))]


async def test_writes_queued_together_commit_once_and_a_failing_one_rolls_back_alone(
        store: SqliteSessionStore) -> None:
    session = await root(store)
    taken = await _inbound(store, "1")
    commits = store.stats.commits
    results = await asyncio.gather(
        store.append_messages(session.id, [msg("user", "first")]),
        # Appends, then fails on an inbound row that does not exist: its own rows go too.
        store.take_inbound([taken + 1000], session.id, [msg("user", "ghost")]),
        store.take_inbound([taken], session.id, [msg("user", "taken")]),
        store.append_messages(session.id, [msg("assistant", "last")]),
        return_exceptions=True)
    assert isinstance(results[1], StoreError) and "cannot be taken" in str(results[1])
    assert not any(isinstance(r, BaseException) for i, r in enumerate(results) if i != 1)
    assert store.stats.commits - commits == 1  # four calls, one transaction
    assert _contents(store, session.id) == ["be brief", "first", "taken", "last"]
    [row] = await store.inbound([taken])
    assert row.status == "taken"


async def test_a_read_queued_after_a_write_sees_it(store: SqliteSessionStore) -> None:
    session = await root(store)
    write = asyncio.create_task(store.append_messages(session.id, [msg("user", "hello")]))
    await asyncio.sleep(0)  # the write is queued, not yet run
    history = await store.load_history(session.id)  # queued behind it
    assert [m.message["content"] for m in history] == ["be brief", "hello"]
    await write


async def test_a_known_chat_resolves_without_a_store_call(store: SqliteSessionStore) -> None:
    session = await root(store)
    calls = store.stats.calls
    for _ in range(3):
        live = await store.live_session(CHAT)
        assert live is not None and live.id == session.id
    assert store.stats.calls == calls
    assert (await store.open_session(CHAT, model=None, system_prompt=None)).id == session.id
    assert store.stats.calls == calls


async def test_the_map_follows_our_own_continuation_and_end(store: SqliteSessionStore) -> None:
    parent = await root(store)
    child = await store.record_turn(parent.id, compacted_turn("a"))
    calls = store.stats.calls
    live = await store.live_session(CHAT)
    assert live is not None and live.id == child.id and store.stats.calls == calls
    await store.end_session(child.id, "reset")
    assert await store.live_session(CHAT) is None


async def test_a_restarted_store_finds_the_live_session_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / "threadline.db"
    async with SqliteSessionStore(path) as first:
        parent = await root(first)
        child = await first.record_turn(parent.id, compacted_turn("a"))
    async with SqliteSessionStore(path) as second:
        calls = second.stats.calls
        live = await second.live_session(CHAT)
        assert live is not None and live.id == child.id
        assert second.stats.calls == calls + 1  # a miss reads the store once


async def test_a_chat_moved_on_by_another_process_is_noticed_at_our_next_write(
        store: SqliteSessionStore) -> None:
    parent = await root(store)
    assert (await store.live_session(CHAT)).id == parent.id  # type: ignore[union-attr]
    async with SqliteSessionStore(store.path) as other:  # `threadline compress`
        child = await other.record_turn(parent.id, compacted_turn("elsewhere"))
    inbound = await _inbound(store, "1")
    with pytest.raises(ContinuationConflict):
        await store.take_inbound([inbound], parent.id, [msg("user", "hi")])
    live = await store.live_session(CHAT)
    assert live is not None and live.id == child.id
    await store.take_inbound([inbound], live.id, [msg("user", "hi")])
    assert _contents(store, child.id)[-1] == "hi"


async def test_a_session_ended_elsewhere_takes_no_new_messages(
        store: SqliteSessionStore) -> None:
    session = await root(store)
    async with SqliteSessionStore(store.path) as other:
        await other.end_session(session.id, "reset")
    inbound = await _inbound(store, "1")
    with pytest.raises(ContinuationConflict):
        await store.take_inbound([inbound], session.id, [msg("user", "late")])
    assert await store.live_session(CHAT) is None
    assert "late" not in _contents(store, session.id)


def _record(chat: str, session_id: str) -> SessionRecord:
    return SessionRecord(session_id, chat, None, "root", None, 1.0, None, None, None)


def test_the_map_keeps_the_chats_that_spoke_last() -> None:
    live = LiveSessions(max_chats=2)
    for n in (1, 2):
        live.put(_record(f"chat:{n}", f"s{n}"))
    assert live.get("chat:1") is not None  # chat 1 spoke again: chat 2 is now the oldest
    live.put(_record("chat:3", "s3"))
    assert len(live) == 2 and live.get("chat:2") is None
    assert live.of("s2") is None and live.of("s1") is not None
    live.grew("s2", 1)  # a write to an evicted chat's session changes nothing
    assert live.get("chat:2") is None


async def test_a_chat_beyond_the_map_costs_one_read(tmp_path: Path) -> None:
    async with SqliteSessionStore(tmp_path / "t.db", max_live_chats=1) as store:
        first = await root(store, chat="telegram:1")
        await root(store, chat="telegram:2")
        calls = store.stats.calls
        live = await store.live_session("telegram:1")
        assert live is not None and live.id == first.id
        assert store.stats.calls == calls + 1


async def test_checkpoints_keep_the_write_ahead_log_from_growing_without_end(
        tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    wal = f"{path}-wal"
    async with SqliteSessionStore(path) as store:
        session = await root(store)
        for n in range(1500):  # one commit each: several checkpoints' worth
            await store.append_messages(session.id, [msg("user", f"message {n} " * 20)])
            if n == 99:  # before the first checkpoint: what one commit adds to the log
                per_commit = _size(wal) / store.stats.commits
        size = _size(wal)
    # Without checkpoints the log would hold all 1,500 commits; with them, at most its
    # limit and the commits since the last checkpoint.
    assert size < WAL_LIMIT_FRAMES * 4096 + per_commit * (CHECKPOINT_EVERY + 100), (
        size, per_commit)
    assert size < per_commit * 1500 / 2
