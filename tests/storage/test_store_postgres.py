"""What only the PostgreSQL store does: its errors name the database, never the password;
its writes for a chat are fenced by the chat's lease."""

from __future__ import annotations

import asyncpg
import pytest

from storage.coordination import Fence, fenced
from storage.errors import LeaseLost, StoreError
from storage.models import Compaction, OutChunk, TurnRecord, UsageRecord
from storage.postgres import PostgresSessionStore
from storage.postgres import schema as pg_schema
from tests.harness.fixtures import free_port
from tests.harness.store import msg


async def test_an_unreachable_database_is_one_line_without_the_password() -> None:
    port = free_port()
    url = f"postgresql://tl:hunter2-secret@127.0.0.1:{port}/threadline"
    with pytest.raises(StoreError) as info:
        await PostgresSessionStore(url).initialize()
    message = str(info.value)
    assert "hunter2-secret" not in message and "\n" not in message
    assert f"postgresql://tl:***@127.0.0.1:{port}/threadline" in message


async def test_a_newer_schema_is_refused_by_name(postgres_url: str) -> None:
    async with PostgresSessionStore(postgres_url):
        pass
    con = await asyncpg.connect(postgres_url)
    try:
        await con.execute("INSERT INTO schema_version (version) VALUES (99)")
    finally:
        await con.close()
    with pytest.raises(StoreError, match="schema version 99, newer than"):
        await PostgresSessionStore(postgres_url).initialize()


async def test_an_older_schema_is_upgraded_only_by_the_service(postgres_url: str) -> None:
    async with PostgresSessionStore(postgres_url):
        pass
    con = await asyncpg.connect(postgres_url)
    try:  # as an older release left it (only the version is read before refusing)
        await con.execute("DELETE FROM schema_version WHERE version = "
                          "(SELECT max(version) FROM schema_version)")
        with pytest.raises(StoreError, match="this database needs an upgrade; run the service"):
            await PostgresSessionStore(postgres_url, upgrade=False).initialize()
        assert await con.fetchval("SELECT count(*) FROM schema_version") == \
            pg_schema.SCHEMA_VERSION - 1
    finally:
        await con.execute("INSERT INTO schema_version (version) VALUES ($1)",
                          pg_schema.SCHEMA_VERSION)
        await con.close()


CHAT = "telegram:42"
LEASE = f"chat:{CHAT}"


async def _expire_leases(url: str) -> None:
    """As a pause past the lease does: the database's clock passes every expiry."""
    con = await asyncpg.connect(url)
    try:
        await con.execute("UPDATE leases SET expires_at = 0")
    finally:
        await con.close()


async def _late_writes(a: PostgresSessionStore, session_id: str, rows: list, fence: Fence
                       ) -> None:
    """Every kind of write a turn makes, under `fence`: each refused whole."""
    with fenced(fence):
        with pytest.raises(LeaseLost):
            await a.record_turn(session_id, TurnRecord(
                after=(msg("assistant", "late"),), replied=(rows[0].id,),
                delivery=(OutChunk("late"),),
                usage=(UsageRecord(input_tokens=1, model="m", purpose="chat"),)))
        with pytest.raises(LeaseLost):
            await a.take_inbound([rows[1].id], session_id, [msg("user", "m2")], ["m2"])
        with pytest.raises(LeaseLost):  # a compaction's several statements too
            await a.record_turn(session_id, TurnRecord(
                compaction=Compaction(messages=(msg("system", "summary"),))))
        with pytest.raises(LeaseLost):  # a /new
            await a.end_session(session_id, "reset")
        with pytest.raises(LeaseLost):  # a command's answer, a failure
            await a.finish_inbound([rows[1].id], "failed")
        with pytest.raises(LeaseLost):  # a part of a stored reply about to be sent
            await a.mark_sending(rows[2].id, 0)


async def test_work_begun_under_an_older_take_of_a_chat_writes_nothing_for_it(
        postgres_url: str) -> None:
    """Fencing by generation (issues 34 and 47): once another process took the chat's
    lease, and also once this process took it back after that, writes made under the
    take they began with are refused whole, in the statement itself."""
    async with PostgresSessionStore(postgres_url) as a, \
            PostgresSessionStore(postgres_url) as b:
        a.member("a:1")
        b.member("b:2")
        first = await a.coordination.claim(LEASE, "a:1", 60.0)
        assert first is not None
        session = await a.open_session(CHAT, model=None, system_prompt=None)
        rows = [await a.ingest(platform="telegram", chat_id="42", message_id=str(n),
                               chat_key=CHAT, text=f"m{n}", sender_id=None,
                               sender_name=None) for n in (1, 2, 3)]
        assert all(rows)
        with fenced(Fence(CHAT, first)):
            await a.take_inbound([rows[0].id], session.id, [msg("user", "m1")], ["m1"])
            await a.take_inbound([rows[2].id], session.id, [msg("user", "m3")], ["m3"])
            await a.record_turn(session.id, TurnRecord(
                after=(msg("assistant", "r3"),), replied=(rows[2].id,),
                delivery=(OutChunk("r3"),)))
        await _expire_leases(postgres_url)  # a pauses past its lease; b takes the chat
        taken = await b.coordination.claim(LEASE, "b:2", 60.0)
        assert taken is not None and taken != first
        # A message arriving at a now goes to b without a claim: ingest tells a who holds.
        row = await a.ingest(platform="telegram", chat_id="42", message_id="4",
                             chat_key=CHAT, text="m4", sender_id=None, sender_name=None)
        assert row is not None and row.held_by == "b:2"
        before = await b.load_history(session.id)
        await _late_writes(a, session.id, rows, Fence(CHAT, first))
        # b gives it up, a takes it back: the chat is a's again, but not that take's.
        await b.coordination.release(LEASE, "b:2", taken)
        again = await a.coordination.claim(LEASE, "a:1", 60.0)
        assert again is not None and again not in (first, taken)
        await _late_writes(a, session.id, rows, Fence(CHAT, first))
        await a.coordination.release(LEASE, "a:1", first)  # an old give-up: changes nothing
        assert await _lease(postgres_url) == [("a:1", again)]
        assert await b.load_history(session.id) == before
        assert [r.status for r in await b.inbound([r.id for r in rows])] == [
            "taken", "pending", "taken"]
        assert await b.deliveries(rows[0].id) == []
        assert (await b.usage_totals(session.id)).calls == 0
        # Work under the take that holds writes as before, and sends what is pending.
        with fenced(Fence(CHAT, again)):
            assert await a.mark_sending(rows[2].id, 0)
            await a.mark_delivered(rows[2].id, 0, "p3")
            assert not await a.mark_sending(rows[2].id, 0)  # sent already: not again
            await a.take_inbound([rows[1].id], session.id, [msg("user", "m2")], ["m2"])
            await a.record_turn(session.id, TurnRecord(after=(msg("assistant", "ok"),),
                                                       replied=(rows[1].id,)))


async def _lease(url: str) -> list[tuple[str, int]]:
    con = await asyncpg.connect(url)
    try:
        return [tuple(r) for r in await con.fetch(f"SELECT holder, epoch FROM leases"
                                                  f" WHERE name = '{LEASE}'")]
    finally:
        await con.close()
