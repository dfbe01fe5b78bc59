"""What an operator reads (the web view), on both backends: chats with their totals, and a
session's messages a page at a time."""

from __future__ import annotations

from storage.base import SessionStore
from storage.models import Compaction, TurnRecord, UsageRecord
from tests.harness.store import grow_chain, msg, root


async def test_chat_summaries_count_sessions_compactions_messages_and_usage_by_model(
        store: SessionStore) -> None:
    ids = await grow_chain(store, 2)  # telegram:42, 2 compactions (usage: model "m")
    await store.record_turn(ids[-1], TurnRecord(
        before=(msg("user", "hi"), msg("assistant", "hello")),
        usage=(UsageRecord("big", "chat", input_tokens=100, output_tokens=7,
                           cache_read_tokens=40),)))
    other = await root(store, "discord:9")
    await store.end_session(other.id, "reset")
    newest = await root(store, "discord:9")
    [first, second] = await store.chat_summaries()
    assert (first.chat_key, first.session_id, first.sessions, first.compactions) == (
        "discord:9", newest.id, 2, 0)
    assert (first.messages, first.usage) == (2, {})  # a system message each
    assert (second.chat_key, second.session_id, second.sessions, second.compactions) == (
        "telegram:42", ids[-1], 3, 2)
    chain_messages = sum(s.message_count for s in await store.chain(ids[0]))
    assert second.messages == chain_messages == 3 + 4 + 4
    assert second.usage["m"].input_tokens == 20 and second.usage["m"].calls == 2
    assert (second.usage["big"].cache_read_tokens, second.usage["big"].calls) == (40, 1)
    assert first.last_at >= second.last_at


async def test_session_messages_come_a_page_at_a_time_in_order(store: SessionStore) -> None:
    session = await root(store)
    await store.append_messages(session.id, [msg("user", f"m{n}") for n in range(25)])
    pages = [await store.session_messages(session.id, start, 10) for start in (0, 10, 20, 30)]
    assert [len(p) for p in pages] == [10, 10, 6, 0]
    texts = [m.message["content"] for page in pages for m in page]
    assert texts == ["be brief", *(f"m{n}" for n in range(25))]
    assert [m.seq for m in pages[1]] == list(range(10, 20))
    assert await store.session_messages("no-such-session", 0, 10) == []


async def test_session_tokens_tell_a_continuation_what_it_started_with(
        store: SessionStore) -> None:
    parent = await root(store)
    await store.append_messages(parent.id, [msg("user", "q", tokens=500)])
    turn = TurnRecord(before=(msg("assistant", "a", tokens=300),),
                      compaction=Compaction(messages=(msg("system", "s", tokens=5),
                                                      msg("user", "[summary]", tokens=40))),
                      after=(msg("assistant", "after", tokens=7),))
    child = await store.record_turn(parent.id, turn)
    await store.append_messages(child.id, [msg("user", "later", tokens=1000)])
    found = await store.session_tokens("telegram:42")
    assert found == {parent.id: (800, 0), child.id: (1052, 52)}


async def test_usage_by_day_sums_each_utc_day_and_model(store: SessionStore, backend) -> None:
    session = await root(store)
    for model, tokens in (("a", 10), ("a", 20), ("b", 5), ("a", 7)):
        await store.record_usage(session.id, UsageRecord(model, "chat", input_tokens=tokens))
    found = await backend.query("SELECT id FROM usage ORDER BY id")
    # 2026-11-25 23:59:59 UTC, three times, then 2026-11-26 00:00:00 UTC.
    for (row_id,), at in zip(found, (1795651199.0, 1795651199.0, 1795651199.0, 1795651200.0),
                             strict=True):
        await backend.query("UPDATE usage SET at = ? WHERE id = ?", at, row_id)
    days = await store.usage_by_day()
    assert list(days) == ["2026-11-25", "2026-11-26"]
    assert {m: u.input_tokens for m, u in days["2026-11-25"].items()} == {"a": 30, "b": 5}
    assert {m: (u.input_tokens, u.calls) for m, u in days["2026-11-26"].items()} == {"a": (7, 1)}
