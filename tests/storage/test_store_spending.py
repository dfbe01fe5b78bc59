"""Spending budgets in the store (issue 38), on both backends: counters kept with each
usage row, holds that reserve a turn's cost before it runs, and admissions that stay
within a limit when many turns race for the last of it."""

from __future__ import annotations

import asyncio
import math
import sqlite3
from contextlib import closing

import asyncpg
import pytest

from storage.base import SessionStore
from storage.errors import ContinuationConflict, StoreError
from storage.models import SpendLimit, Spent, TurnRecord, UsageRecord
from storage.postgres import schema as postgres_schema
from storage.sqlite import schema as sqlite_schema
from tests.harness.store import Backend, compacted_turn, msg, root

USER, CHAT, BOT = "user:telegram:42:d2026-11-27", "chat:telegram:-100:m2026-11", "bot:d2026-11-27"
NOW = 1_000_000.0


def call(usd: float, *keys: str, input_tokens: int = 100, output_tokens: int = 20,
         cache_read: int = 0, cache_write: int = 0, reasoning: int = 0) -> UsageRecord:
    return UsageRecord("m", "chat", input_tokens=input_tokens, output_tokens=output_tokens,
                       cache_read_tokens=cache_read, cache_write_tokens=cache_write,
                       reasoning_tokens=reasoning, usd=usd, spend_keys=keys)


async def holds(backend: Backend) -> list[tuple[object, ...]]:
    return await backend.query("SELECT hold_id, key FROM spend_holds ORDER BY hold_id, key")


# --- counters -------------------------------------------------------------------------------
async def test_every_stored_usage_row_adds_to_each_of_its_keys(store: SessionStore) -> None:
    session = await root(store)
    # A turn with two calls (a summary counts against the chat whose turn caused it).
    await store.record_turn(session.id, TurnRecord(
        after=(msg("assistant", "hi"),),
        usage=(call(0.25, USER, CHAT, BOT, cache_read=1000, cache_write=50, reasoning=7),
               call(0.5, CHAT, BOT, input_tokens=10, output_tokens=5))))
    await store.record_usage(session.id, call(0.125, USER, BOT, input_tokens=1, output_tokens=1))
    child = await store.record_turn(session.id, compacted_turn("a"))  # usage without keys
    await store.record_turn(child.id, TurnRecord(  # and a compaction's own usage
        compaction=compacted_turn("b").compaction, usage=(call(1.0, CHAT),)))
    await store.record_usage(session.id, call(9.0))  # no keys: no counter

    spent = await store.spent([USER, CHAT, BOT, "user:telegram:7:d2026-11-27"], now=NOW)
    # tokens: input + output + cache read + cache write (reasoning is inside output)
    assert spent == {USER: Spent(0.375, 1170 + 2), CHAT: Spent(1.75, 1170 + 15 + 120),
                     BOT: Spent(0.875, 1170 + 15 + 2),
                     "user:telegram:7:d2026-11-27": Spent()}
    assert await store.spent([], now=NOW) == {}


async def test_a_key_named_twice_by_one_call_counts_it_once(store: SessionStore) -> None:
    session = await root(store)
    await store.record_usage(session.id, call(0.5, USER, USER))
    assert await store.spent([USER], now=NOW) == {USER: Spent(0.5, 120)}


async def test_counters_and_holds_survive_closing_and_reopening(backend: Backend) -> None:
    await backend.prepare()
    async with backend.store() as first:
        session = await root(first)
        await first.record_usage(session.id, call(0.75, USER, BOT))
        assert await first.hold_spend([SpendLimit(USER, 1.0, None)], "turn-1", 0.125, 50,
                                      now=NOW, ttl_s=60) is None
    async with backend.store() as second:
        assert await second.spent([USER, BOT], now=NOW + 1) == {
            USER: Spent(0.875, 170), BOT: Spent(0.75, 120)}


# --- holds ----------------------------------------------------------------------------------
async def test_spent_counts_live_holds_only(store: SessionStore, backend: Backend) -> None:
    session = await root(store)
    await store.record_usage(session.id, call(0.5, USER))
    limits = [SpendLimit(USER, 10.0, None), SpendLimit(BOT, None, None)]
    assert await store.hold_spend(limits, "a", 0.25, 1000, now=NOW, ttl_s=30) is None
    assert await store.hold_spend(limits[:1], "b", 0.125, 10, now=NOW + 10, ttl_s=60) is None
    assert await store.spent([USER, BOT], now=NOW + 29) == {
        USER: Spent(0.875, 1130), BOT: Spent(0.25, 1000)}
    # "a" expired at NOW + 30: no longer counted, by reads nor by admissions...
    assert await store.spent([USER, BOT], now=NOW + 30) == {
        USER: Spent(0.625, 130), BOT: Spent()}
    assert await holds(backend) == [("a", BOT), ("a", USER), ("b", USER)]
    # No hold lives past infinity: the counters alone (spent, not merely held).
    assert await store.spent([USER, BOT], now=math.inf) == {USER: Spent(0.5, 120), BOT: Spent()}
    # ...and the next admission removes it.
    assert await store.hold_spend(limits, "c", 0.0, 0, now=NOW + 31, ttl_s=60) is None
    assert await holds(backend) == [("b", USER), ("c", BOT), ("c", USER)]


async def test_release_hold_removes_it_under_every_key_and_may_be_repeated(
        store: SessionStore, backend: Backend) -> None:
    limits = [SpendLimit(USER, 1.0, None), SpendLimit(CHAT, 5.0, None)]
    for hold_id in ("a", "b"):
        assert await store.hold_spend(limits, hold_id, 0.25, 10, now=NOW, ttl_s=60) is None
    await store.release_hold("a")
    await store.release_hold("a")
    await store.release_hold("never-placed")
    assert await holds(backend) == [("b", CHAT), ("b", USER)]
    assert await store.spent([USER], now=NOW) == {USER: Spent(0.25, 10)}


@pytest.mark.parametrize("shape", ["messages", "ledger only", "compaction"])
async def test_a_turn_books_its_usage_and_drops_its_hold_together(
        store: SessionStore, backend: Backend, shape: str) -> None:
    session = await root(store)
    limits = [SpendLimit(USER, 1.0, None), SpendLimit(BOT, None, None)]
    assert await store.hold_spend(limits, "turn-1", 0.5, 500, now=NOW, ttl_s=60) is None
    assert await store.hold_spend(limits, "turn-2", 0.25, 100, now=NOW, ttl_s=60) is None
    turn = {"messages": TurnRecord(after=(msg("assistant", "ok"),)),
            "ledger only": TurnRecord(),
            "compaction": compacted_turn("x")}[shape]
    booked = TurnRecord(before=turn.before, compaction=turn.compaction, after=turn.after,
                        usage=(call(0.375, USER, BOT),), release_hold="turn-1")
    await store.record_turn(session.id, booked)
    assert await holds(backend) == [("turn-2", BOT), ("turn-2", USER)]
    assert await store.spent([USER], now=NOW) == {USER: Spent(0.375 + 0.25, 120 + 100)}


async def test_a_turn_that_is_refused_keeps_its_hold_and_adds_nothing(
        store: SessionStore, backend: Backend) -> None:
    session = await root(store)
    await store.record_turn(session.id, compacted_turn("first"))  # session is continued
    assert await store.hold_spend([SpendLimit(USER, 1.0, None)], "t", 0.5, 10, now=NOW,
                                  ttl_s=60) is None
    with pytest.raises(ContinuationConflict):  # a compaction's transaction
        await store.record_turn(session.id, TurnRecord(
            compaction=compacted_turn("again").compaction, usage=(call(0.25, USER),),
            release_hold="t"))
    with pytest.raises(StoreError):  # a turn's single statement (PostgreSQL)
        await store.record_turn("no-such-session", TurnRecord(
            after=(msg("assistant", "x"),), usage=(call(0.25, USER),), release_hold="t"))
    assert await holds(backend) == [("t", USER)]
    assert await store.spent([USER], now=NOW) == {USER: Spent(0.5, 10)}


# --- admission --------------------------------------------------------------------------------
async def test_a_usd_limit_is_refused_once_spent_and_held_reach_it(
        store: SessionStore, backend: Backend) -> None:
    session = await root(store)
    await store.record_usage(session.id, call(0.75, USER, CHAT))
    limits = [SpendLimit(CHAT, 5.0, None), SpendLimit(USER, 1.0, None)]
    assert await store.hold_spend(limits, "a", 0.125, 10, now=NOW, ttl_s=60) is None
    assert await store.hold_spend(limits, "b", 0.125, 10, now=NOW, ttl_s=60) is None
    # 0.75 spent + 0.25 held = the limit: refused, named, and nothing placed anywhere.
    assert await store.hold_spend(limits, "c", 0.125, 10, now=NOW, ttl_s=60) == USER
    assert {row[0] for row in await holds(backend)} == {"a", "b"}
    await store.release_hold("b")
    assert await store.hold_spend(limits, "d", 0.125, 10, now=NOW, ttl_s=60) is None


async def test_a_token_limit_is_refused_on_its_own(store: SessionStore) -> None:
    session = await root(store)
    await store.record_usage(session.id, call(0.0, CHAT, input_tokens=900, output_tokens=50))
    limits = [SpendLimit(USER, 100.0, None), SpendLimit(CHAT, 100.0, 1000)]
    assert await store.hold_spend(limits, "a", 0.0, 49, now=NOW, ttl_s=60) is None  # 999
    assert await store.hold_spend(limits, "b", 0.0, 1, now=NOW, ttl_s=60) is None  # 1000
    assert await store.hold_spend(limits, "c", 0.0, 1, now=NOW, ttl_s=60) == CHAT
    assert await store.spent([USER, CHAT], now=NOW) == {USER: Spent(0.0, 50),
                                                        CHAT: Spent(0.0, 1000)}


async def test_a_limit_of_none_is_ignored_and_the_first_reached_is_named(
        store: SessionStore) -> None:
    session = await root(store)
    await store.record_usage(session.id, call(50.0, USER, CHAT, BOT, input_tokens=10**9))
    unlimited = [SpendLimit(USER, None, None), SpendLimit(CHAT, None, 2 * 10**9)]
    assert await store.hold_spend(unlimited, "a", 1.0, 10, now=NOW, ttl_s=60) is None
    both = [SpendLimit(USER, None, None), SpendLimit(CHAT, 10.0, None), SpendLimit(BOT, 1.0, 5)]
    assert await store.hold_spend(both, "b", 1.0, 10, now=NOW, ttl_s=60) == CHAT
    assert await store.hold_spend([], "c", 1.0, 10, now=NOW, ttl_s=60) is None
    assert await store.spent([USER], now=NOW) == {USER: Spent(51.0, 10**9 + 20 + 10)}


# --- racing admissions ------------------------------------------------------------------------
TURN_USD = 0.125  # exact in binary: sums compare without rounding


async def test_twenty_racing_turns_from_three_processes_overshoot_by_one_turn_at_most(
        backend: Backend) -> None:
    """Acceptance 3: near the limit, racing admissions from three stores (three pools on
    PostgreSQL, three connections to the file on SQLite, as three processes) place holds
    worth at most the room left plus one turn."""
    await backend.prepare()
    sizes = {"min_connections": 7} if backend.name == "postgres" else {}
    async with backend.store(**sizes) as a, backend.store(**sizes) as b, \
            backend.store(**sizes) as c:
        session = await root(a)
        for spent in (0.5, 0.9375):  # room for four turns, then for part of one
            key = f"user:telegram:42:{spent}"
            await a.record_usage(session.id, call(spent, key))
            limit = [SpendLimit(key, 1.0, None)]
            placed = await asyncio.gather(*(
                store.hold_spend(limit, f"{key}:{n}", TURN_USD, 100, now=NOW, ttl_s=60)
                for n, store in zip(range(20), [a, b, c] * 7, strict=False)))
            assert set(placed) <= {None, key}, placed
            admitted = placed.count(None)
            assert 1 <= admitted and admitted * TURN_USD <= (1.0 - spent) + TURN_USD, \
                (spent, admitted)
            [(count,)] = await backend.query(
                "SELECT COUNT(*) FROM spend_holds WHERE key = ?", key)
            assert count == admitted
            assert await a.spent([key], now=NOW) == {key: Spent(spent + admitted * TURN_USD,
                                                                120 + admitted * 100)}


# --- upgrading an older database --------------------------------------------------------------
async def older_database(backend: Backend) -> None:
    """The database as the release before spending budgets left it, with a chat and a call."""
    await backend.prepare()
    rows = ("INSERT INTO sessions (id, chat_key, kind, started_at) VALUES ('old', 'c', 'root', 1)",
            "INSERT INTO usage (session_id, model, purpose, input, at) VALUES ('old', 'm', 'chat',"
            " 7, 1)")
    if backend.name == "sqlite":
        with closing(sqlite3.connect(backend.path, isolation_level=None)) as db:
            previous = sqlite_schema.SCHEMA_VERSION - 1
            assert sqlite_schema.migrate(db, str(backend.path), target=previous) == previous
            for sql in rows:
                db.execute(sql)
        return
    con = await asyncpg.connect(backend.url)
    try:
        await con.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
        for version, statements in enumerate(postgres_schema.MIGRATIONS[:-1], start=1):
            for sql in statements:
                await con.execute(sql)
            await con.execute("INSERT INTO schema_version VALUES ($1)", version)
        for sql in rows:
            await con.execute(sql)
    finally:
        await con.close()


async def test_an_older_database_keeps_its_rows_and_gains_the_counters(
        backend: Backend) -> None:
    await older_database(backend)
    assert not await backend.query("SELECT 1 FROM usage WHERE input <> 7")
    async with backend.store() as store:
        assert (await store.usage_totals("old")).input_tokens == 7
        await store.record_usage("old", call(0.5, USER))
        assert await store.hold_spend([SpendLimit(USER, 1.0, None)], "h", 0.25, 5, now=NOW,
                                      ttl_s=60) is None
        assert await store.spent([USER], now=NOW) == {USER: Spent(0.75, 125)}
    assert await backend.query("SELECT id, chat_key FROM sessions") == [("old", "c")]
    assert len(await backend.query("SELECT id FROM usage")) == 2
