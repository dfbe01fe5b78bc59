"""What only the PostgreSQL store does: its errors name the database, never the password;
its writes for a chat are fenced by the chat's lease."""

from __future__ import annotations

import asyncpg
import pytest

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


async def test_a_process_whose_chat_lease_was_taken_writes_nothing_for_it(
        postgres_url: str) -> None:
    """Fencing (issue 34): once another process holds a chat's lease, this one's take and
    turn for it are refused whole, in the statement itself, whatever this one believes."""
    async with PostgresSessionStore(postgres_url) as a, \
            PostgresSessionStore(postgres_url) as b:
        a.fence("a:1")
        b.fence("b:2")
        assert await a.coordination.claim("chat:telegram:42", "a:1", 60.0)
        session = await a.open_session("telegram:42", model=None, system_prompt=None)
        rows = [await a.ingest(platform="telegram", chat_id="42", message_id=str(n),
                               chat_key="telegram:42", text=f"m{n}", sender_id=None,
                               sender_name=None) for n in (1, 2)]
        assert all(rows)
        await a.take_inbound([rows[0].id], session.id, [msg("user", "m1")], ["m1"])
        # a pauses past its lease; b takes the chat.
        con = await asyncpg.connect(postgres_url)
        try:
            await con.execute("UPDATE leases SET expires_at = 0")
        finally:
            await con.close()
        assert await b.coordination.claim("chat:telegram:42", "b:2", 60.0)
        before = await b.load_history(session.id)
        with pytest.raises(LeaseLost):
            await a.record_turn(session.id, TurnRecord(
                after=(msg("assistant", "late"),), replied=(rows[0].id,),
                delivery=(OutChunk("late"),), usage=(UsageRecord(input_tokens=1, model="m", purpose="chat"),)))
        with pytest.raises(LeaseLost):
            await a.take_inbound([rows[1].id], session.id, [msg("user", "m2")], ["m2"])
        with pytest.raises(LeaseLost):  # a compaction's several statements too
            await a.record_turn(session.id, TurnRecord(
                compaction=Compaction(messages=(msg("system", "summary"),))))
        assert await b.load_history(session.id) == before
        assert [r.status for r in await b.inbound([r.id for r in rows])] == ["taken", "pending"]
        assert await b.deliveries(rows[0].id) == []
        assert (await b.usage_totals(session.id)).calls == 0
        # The holder writes as before.
        await b.take_inbound([rows[1].id], session.id, [msg("user", "m2")], ["m2"])
        await b.record_turn(session.id, TurnRecord(after=(msg("assistant", "ok"),),
                                                   replied=(rows[1].id,)))
