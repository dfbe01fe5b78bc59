"""Continuation chains: one-transaction compaction, the tip, races, cycles, chain-wide usage."""

from __future__ import annotations

import sqlite3
import time

import asyncpg
import pytest

from storage.base import SessionStore
from storage.errors import ContinuationConflict, StoreError
from storage.models import Compaction, TurnRecord, UsageRecord
from tests.harness.store import CHAT, Backend, compacted_turn, grow_chain, msg, root

# What each backend raises when a row breaks the one-continuation unique index.
UNIQUE_VIOLATION = (sqlite3.IntegrityError, asyncpg.UniqueViolationError)

# --- one transaction ---------------------------------------------------------------------
async def test_compaction_ends_the_parent_and_starts_the_linked_child(
        store: SessionStore, backend: Backend) -> None:
    parent = await root(store)
    row = await store.ingest(platform="telegram", chat_id="42", message_id="9", chat_key=CHAT,
                             text="question", sender_id="u", sender_name="Ada")
    [taken] = await store.take_inbound([row.id], parent.id, [msg("user", "question")])
    turn = TurnRecord(
        before=(msg("assistant", "long answer"),),
        compaction=Compaction(messages=(msg("system", "be brief"), msg("user", "[summary]")),
                              engine_state={"previous_summary": "[summary]"}),
        after=(msg("assistant", "after the squeeze"),),
        replied=(row.id,), engine_state={"strikes": 0}, last_prompt_tokens=321)
    child = await store.record_turn(parent.id, turn)

    ended = await store.get_session(parent.id)
    assert ended is not None and ended.end_reason == "compression"
    assert (child.parent_session_id, child.kind, child.live) == (parent.id, "compression", True)
    assert ended.ended_at is not None and child.started_at >= ended.ended_at
    assert (child.model, child.system_prompt, child.compression_count) == (
        "gpt-x", "be brief", 1)
    assert (child.engine_state, child.last_prompt_tokens) == ({"strikes": 0}, 321)
    assert await backend.query("SELECT session_id FROM chats WHERE chat_key = ?",
                               CHAT) == [(child.id,)]
    assert (await store.live_session(CHAT)) == child
    assert [(m.seq, m.message["content"]) for m in await store.load_history(child.id)] == [
        (0, "be brief"), (1, "[summary]"), (2, "after the squeeze")]
    parent_history = await store.load_history(parent.id)
    assert [m.message["content"] for m in parent_history] == [
        "be brief", "question", "long answer"]
    [waiting] = await store.open_inbound()
    assert (await store.message(waiting.reply_row_id)).message["content"] == "after the squeeze"
    await store.finish_inbound([row.id], "answered")  # the platform accepted the reply
    assert await store.open_inbound() == []
    # The question was summarized away, not copied: its row in the ended parent stays as
    # it was when the parent ended.
    assert parent_history[1].id == taken.id
    assert (await store.load_history(parent.id))[1].answered is False


async def test_a_copy_in_the_continuation_keeps_its_metadata_and_takes_the_answer(
        store: SessionStore) -> None:
    parent = await root(store)
    row = await store.ingest(platform="telegram", chat_id="42", message_id="9", chat_key=CHAT,
                             text="question", sender_id="u", sender_name="Ada")
    [taken] = await store.take_inbound([row.id], parent.id, [
        msg("user", "question", platform_message_id="9", sender_id="u", sender_name="Ada")])
    # system (seq 0) and the question (seq 1) are kept verbatim; the summary is new.
    compaction = Compaction(messages=(msg("system", "be brief"), msg("user", "[summary]"),
                                      msg("user", "question")),
                            covers=2, sources=(0, None, 1))
    child = await store.record_turn(parent.id, TurnRecord(
        compaction=compaction, after=(msg("assistant", "answer"),), replied=(row.id,)))
    await store.finish_inbound([row.id], "answered")
    copy = (await store.load_history(child.id))[2]
    assert (copy.platform_message_id, copy.sender_id, copy.sender_name, copy.answered) == (
        "9", "u", "Ada", True)
    [ledger] = await store.inbound([row.id])
    assert ledger.message_row_id == copy.id
    original = (await store.load_history(parent.id))[1]
    assert original.id == taken.id and original.answered is False


async def test_a_failing_turn_writes_nothing_at_all(store: SessionStore,
                                                    backend: Backend) -> None:
    parent = await root(store)
    before = await backend.snapshot()
    bad = TurnRecord(before=(msg("assistant", "fine"),),
                     compaction=Compaction(messages=(msg("user", "summary"),)),
                     after=(msg("assistant", [object()]),))  # not JSON: fails last
    with pytest.raises(StoreError):
        await store.record_turn(parent.id, bad)
    assert await backend.snapshot() == before
    assert (await store.live_session(CHAT)) == parent


async def test_a_second_continuation_of_the_same_parent_is_refused_and_writes_nothing(
        store: SessionStore, backend: Backend) -> None:
    parent = await root(store)
    row = await store.ingest(platform="telegram", chat_id="42", message_id="1", chat_key=CHAT,
                             text="x", sender_id=None, sender_name=None)
    await store.record_turn(parent.id, compacted_turn("first"))
    before = await backend.snapshot()
    second = TurnRecord(before=(msg("assistant", "fork?"),),
                        compaction=Compaction(messages=(msg("user", "other summary"),)),
                        replied=(row.id,),
                        usage=(UsageRecord("m", "summary", input_tokens=99),))
    with pytest.raises(ContinuationConflict):
        await store.record_turn(parent.id, second)
    with pytest.raises(ContinuationConflict):  # plain appends go to the continuation too
        await store.append_messages(parent.id, [msg("user", "late")])
    assert await backend.snapshot() == before


async def test_the_unique_index_is_the_final_guard_against_a_fork(
        store: SessionStore, backend: Backend) -> None:
    parent = await root(store)
    insert_child = ("INSERT INTO sessions (id, chat_key, parent_session_id, kind, started_at)"
                    " VALUES (?, ?, ?, 'compression', 1)")
    # A child written behind the store's back, parent still live: the database itself
    # refuses a second one.
    await backend.query(insert_child, "intruder", CHAT, parent.id)
    with pytest.raises(UNIQUE_VIOLATION, match="(?i)unique"):
        await backend.query(insert_child, "second", CHAT, parent.id)
    with pytest.raises(ContinuationConflict):
        await store.record_turn(parent.id, compacted_turn())


async def test_a_stale_compaction_carries_over_the_turns_it_did_not_see(
        store: SessionStore) -> None:
    parent = await root(store)  # 1 message: the system prompt
    await store.append_messages(parent.id, [msg("user", "q1"), msg("assistant", "a1")])
    seen = 3  # an operator's compaction is computed from these three ...
    await store.append_messages(parent.id, [  # ... while the gateway answers another turn
        msg("user", "q2", platform_message_id="77", answered=True, sender_name="Ada"),
        msg("assistant", "a2")])
    child = await store.record_turn(parent.id, TurnRecord(
        before=(msg("assistant", "operator note"),),
        compaction=Compaction(messages=(msg("system", "sys"), msg("user", "summary of q1")),
                              covers=seen),
        after=(msg("assistant", "after"),)))
    history = await store.load_history(child.id)
    assert [(h.seq, h.message["content"]) for h in history] == [
        (0, "sys"), (1, "summary of q1"), (2, "q2"), (3, "a2"), (4, "after")]
    carried = history[2]
    assert (carried.platform_message_id, carried.answered, carried.sender_name) == (
        "77", True, "Ada")
    assert [h.session_id for h in await store.search("q2")] == [parent.id, child.id]


async def test_a_copy_of_this_turns_own_message_keeps_its_metadata_past_a_carry_over(
        store: SessionStore) -> None:
    # A source at or past `covers` counts through this turn's `before`, which starts after
    # everything else the parent holds, here a turn stored since the transcript was read.
    parent = await root(store)
    await store.append_messages(parent.id, [msg("user", "q1")])
    seen = 2  # the transcript was read from seqs 0 and 1 ...
    await store.append_messages(parent.id, [  # ... then another turn was stored as seq 2
        msg("user", "late", platform_message_id="L", sender_name="Bo")])
    interim = msg("assistant", "interim", platform_message_id="77", answered=True)
    child = await store.record_turn(parent.id, TurnRecord(
        before=(interim,),  # seq 3 in the parent: transcript position seen + 0
        compaction=Compaction(messages=(msg("system", "sys"), msg("user", "summary"),
                                        msg("assistant", "interim")),
                              covers=seen, sources=(0, None, seen))))
    history = await store.load_history(child.id)
    assert [h.message["content"] for h in history] == ["sys", "summary", "interim", "late"]
    copy, carried = history[2], history[3]
    assert (copy.platform_message_id, copy.answered, copy.sender_name) == ("77", True, None)
    assert (carried.platform_message_id, carried.sender_name) == ("L", "Bo")


async def test_an_up_to_date_compaction_carries_nothing(store: SessionStore) -> None:
    parent = await root(store)
    await store.append_messages(parent.id, [msg("user", "q1")])
    child = await store.record_turn(parent.id, TurnRecord(
        before=(msg("assistant", "a1"),),
        compaction=Compaction(messages=(msg("user", "summary"),), covers=2)))
    assert [h.message["content"] for h in await store.load_history(child.id)] == ["summary"]


async def test_a_compaction_claiming_unseen_history_is_refused(
        store: SessionStore, backend: Backend) -> None:
    parent = await root(store)
    before = await backend.snapshot()
    with pytest.raises(StoreError, match="covers 5 messages"):
        await store.record_turn(parent.id, TurnRecord(
            compaction=Compaction(messages=(msg("user", "summary"),), covers=5)))
    assert await backend.snapshot() == before


# --- the tip and the chain ---------------------------------------------------------------
@pytest.mark.parametrize("depth", [0, 1, 25])
async def test_tip_is_the_last_continuation_from_anywhere_in_the_chain(
        store: SessionStore, depth: int) -> None:
    ids = await grow_chain(store, depth)
    for session_id in ids:
        assert await store.get_compression_tip(session_id) == ids[-1]
    assert [s.id for s in await store.chain(ids[len(ids) // 2])] == ids
    live = await store.live_session(CHAT)
    assert live is not None and live.id == ids[-1] and live.compression_count == depth


async def test_tip_of_an_unknown_id_is_that_id(store: SessionStore) -> None:
    assert await store.get_compression_tip("nobody") == "nobody"
    assert await store.chain("nobody") == []


async def test_tip_never_follows_a_branch(store: SessionStore, backend: Backend) -> None:
    first, second = await grow_chain(store, 1)
    for branch, parent in (("branch-a", first), ("branch-b", second)):
        await backend.query("INSERT INTO sessions (id, chat_key, parent_session_id, kind,"
                            " started_at) VALUES (?, ?, ?, 'branch', ?)",
                            branch, CHAT, parent, time.time() + 10)
    assert await store.get_compression_tip(first) == second
    assert await store.get_compression_tip(second) == second
    assert await store.get_compression_tip("branch-a") == "branch-a"
    assert [s.id for s in await store.chain("branch-b")] == ["branch-b"]
    assert [s.id for s in await store.chain(first)] == [first, second]


async def test_tip_follows_only_sessions_that_ended_by_compression(
        store: SessionStore, backend: Backend) -> None:
    parent = await root(store)
    await store.end_session(parent.id, "reset")
    # A compression-kind child of a reset session is not followed.
    await backend.query("INSERT INTO sessions (id, chat_key, parent_session_id, kind,"
                        " started_at) VALUES ('stray', ?, ?, 'compression', 1)",
                        CHAT, parent.id)
    assert await store.get_compression_tip(parent.id) == parent.id
    assert await store.live_session(CHAT) is None  # the chat's session ended: /new


async def test_a_cycle_written_by_hand_still_terminates(store: SessionStore,
                                                       backend: Backend) -> None:
    # One statement for both rows: each names the other as parent, and both backends
    # check a (non-deferred) foreign key at the end of the statement, not per row.
    await backend.query("INSERT INTO sessions (id, chat_key, parent_session_id, kind,"
                        " end_reason, started_at, ended_at)"
                        " VALUES ('a', ?, 'b', 'compression', 'compression', 1, 2),"
                        " ('b', ?, 'a', 'compression', 'compression', 1, 2)", CHAT, CHAT)
    started = time.perf_counter()
    assert await store.get_compression_tip("a") in {"a", "b"}
    assert {s.id for s in await store.chain("a")} == {"a", "b"}
    assert (await store.usage_totals("a")).calls == 0
    assert time.perf_counter() - started < 5


# --- usage over a chain ------------------------------------------------------------------
async def test_usage_totals_cover_the_whole_chain_and_nothing_else(
        store: SessionStore) -> None:
    ids = await grow_chain(store, 3)  # each compaction books 10 in / 2 out on its parent
    await store.record_usage(ids[0], UsageRecord("m", "chat", input_tokens=1000, output_tokens=100,
                                                    cache_read_tokens=5, cache_write_tokens=6,
                                                    reasoning_tokens=7))
    await store.record_usage(ids[-1], UsageRecord("m", "chat", input_tokens=1, output_tokens=1))
    other = await root(store, chat="discord:7")
    await store.record_usage(other.id, UsageRecord("m", "chat", input_tokens=555, output_tokens=555))
    for session_id in ids:
        totals = await store.usage_totals(session_id)
        assert (totals.input_tokens, totals.output_tokens, totals.cache_read_tokens,
                totals.cache_write_tokens, totals.reasoning_tokens, totals.calls) == (
            1031, 107, 5, 6, 7, 5)
    assert (await store.usage_totals(other.id)).input_tokens == 555
