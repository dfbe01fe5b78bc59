"""Several writers at once: racing compactions, a busy file, cancellation, kill -9."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

from storage.base import SessionStore
from storage.errors import ContinuationConflict, StoreError
from storage.models import SessionRecord, TurnRecord
from storage.sqlite import SqliteSessionStore
from tests.harness.store import CHAT, Backend, compacted_turn, msg, raw, root

REPO = Path(__file__).resolve().parents[2]


# --- racing compactions ------------------------------------------------------------------
async def _race(stores: list[SessionStore], parent_id: str) -> list[Any]:
    return await asyncio.gather(
        *(s.record_turn(parent_id, compacted_turn(str(i))) for i, s in enumerate(stores)),
        return_exceptions=True)


async def _assert_one_winner(store: SessionStore, backend: Backend, parent_id: str,
                             results: list[Any]) -> None:
    winners = [r for r in results if isinstance(r, SessionRecord)]
    losers = [r for r in results if isinstance(r, ContinuationConflict)]
    assert (len(winners), len(losers)) == (1, len(results) - 1), results
    children = await backend.query("SELECT id FROM sessions WHERE parent_session_id = ?",
                                   parent_id)
    [(answers,)] = await backend.query("SELECT COUNT(*) FROM messages WHERE session_id = ?"
                                       " AND content LIKE 'answer %'", parent_id)
    assert children == [(winners[0].id,)] and answers == 1
    assert await store.get_compression_tip(parent_id) == winners[0].id


async def test_racing_compactions_in_one_process_make_exactly_one_continuation(
        store: SessionStore, backend: Backend) -> None:
    for _ in range(5):
        parent = await root(store)
        await _assert_one_winner(store, backend, parent.id,
                                 await _race([store] * 3, parent.id))


async def test_racing_compactions_from_two_store_objects_make_exactly_one_continuation(
        store: SessionStore, backend: Backend) -> None:
    async with backend.store() as other:  # another process: its own connection or pool
        for _ in range(5):
            parent = await root(store)
            await _assert_one_winner(store, backend, parent.id,
                                     await _race([store, other, store, other], parent.id))


# --- a busy SQLite file (PostgreSQL has no file lock) ---------------------------------------
async def test_a_briefly_locked_file_is_retried_until_it_frees(tmp_path: Path) -> None:
    async with SqliteSessionStore(tmp_path / "t.db", busy_timeout_ms=50,
                                  lock_retries=5) as store:
        session = await root(store)
        with raw(store) as other:  # another process holds the write lock for a moment
            other.execute("BEGIN IMMEDIATE")
            append = asyncio.create_task(store.append_messages(session.id, [msg("user", "hi")]))
            await asyncio.sleep(0.2)
            assert not append.done()
            other.execute("COMMIT")
        [stored] = await asyncio.wait_for(append, 5)
        assert stored.seq == 1


async def test_a_file_locked_for_too_long_gives_a_store_error(tmp_path: Path) -> None:
    async with SqliteSessionStore(tmp_path / "t.db", busy_timeout_ms=20,
                                  lock_retries=2) as store:
        session = await root(store)
        with raw(store) as other:
            other.execute("BEGIN IMMEDIATE")
            with pytest.raises(StoreError, match="locked"):
                await store.append_messages(session.id, [msg("user", "hi")])
            other.execute("ROLLBACK")
        assert len(await store.load_history(session.id)) == 1  # usable again


# --- cancelled callers -------------------------------------------------------------------
async def test_a_cancelled_caller_does_not_cut_a_continuation_in_half(
        store: SessionStore) -> None:
    for ticks in range(12):  # cancel at successive points of the transaction
        parent = await root(store, chat=f"console:{ticks}")
        turn = asyncio.create_task(store.record_turn(parent.id, compacted_turn()))
        for _ in range(ticks):
            await asyncio.sleep(0)
        turn.cancel()  # the store finishes or undoes its transaction: it may be done
        with contextlib.suppress(asyncio.CancelledError):
            await turn
        chain = await store.chain(parent.id)
        assert [s.live for s in chain] in ([True], [False, True])  # all or nothing
        live = await store.live_session(f"console:{ticks}")
        assert live is not None and live.id == chain[-1].id
        if len(chain) == 2:
            assert [m.message["content"] for m in await store.load_history(live.id)] == [
                "sys", "summary "]
    await store.record_turn(live.id, TurnRecord(after=(msg("assistant", "still fine"),)))


# --- durability --------------------------------------------------------------------------
WRITER = """
import asyncio, sys
from storage.models import Compaction, NewMessage, TurnRecord
from storage.postgres import PostgresSessionStore
from storage.sqlite import SqliteSessionStore

async def main():
    target = sys.argv[1]
    opened = (PostgresSessionStore(target) if target.startswith("postgresql://")
              else SqliteSessionStore(target))
    async with opened as store:
        live = await store.live_session("telegram:42")
        if live is None:
            live = await store.create_root_session("telegram:42", model="m", system_prompt="s")
        n = 0
        while True:
            words = [NewMessage({"role": "user", "content": f"turn {n} " * 50})] * 20
            turn = TurnRecord(before=tuple(words), compaction=Compaction(
                messages=(NewMessage({"role": "user", "content": f"summary {n}"}),)))
            live = await store.record_turn(live.id, turn)
            n += 1
            print(n, flush=True)

asyncio.run(main())
"""


async def test_kill_9_mid_compaction_leaves_a_consistent_chain(
        backend: Backend, tmp_path: Path) -> None:
    await backend.prepare()
    target = backend.url or str(backend.path)
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    for round_ in range(3):
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(script), target, cwd=REPO, stdout=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(REPO)})
        assert proc.stdout is not None
        for _ in range(3 + 2 * round_):  # let a few compactions commit, then kill mid-flight
            assert await asyncio.wait_for(proc.stdout.readline(), 30)
        proc.kill()
        await proc.wait()
        await _assert_consistent(backend)


async def _assert_consistent(backend: Backend) -> None:
    async with backend.store() as store:
        live = await store.live_session(CHAT)
        assert live is not None
        chain = await store.chain(live.id)
        assert chain[0].kind == "root" and chain[-1].id == live.id
        for parent, child in zip(chain, chain[1:], strict=False):
            assert parent.end_reason == "compression" and parent.ended_at is not None
            assert child.parent_session_id == parent.id and child.kind == "compression"
            assert child.started_at >= parent.ended_at
            history = await store.load_history(child.id)
            assert history and history[0].message["content"].startswith("summary")
        assert [s.live for s in chain].count(True) == 1
    if backend.name != "sqlite":
        return  # PostgreSQL rolled the killed client's transaction back; no file to check
    with contextlib.closing(sqlite3.connect(backend.path)) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        db.execute("INSERT INTO messages_fts(messages_fts) VALUES ('integrity-check')")
