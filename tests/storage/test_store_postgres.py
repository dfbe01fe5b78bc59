"""What only the PostgreSQL store does: its errors name the database, never the password."""

from __future__ import annotations

import asyncpg
import pytest

from storage.errors import StoreError
from storage.postgres import PostgresSessionStore
from tests.harness.fixtures import free_port


async def test_an_unreachable_database_is_one_line_without_the_password() -> None:
    port = free_port()
    url = f"postgresql://tl:hunter2-secret@127.0.0.1:{port}/threadline"
    with pytest.raises(StoreError) as info:
        await PostgresSessionStore(url).initialize()
    message = str(info.value)
    assert "hunter2-secret" not in message and "\n" not in message
    assert f"postgresql://tl@127.0.0.1:{port}/threadline" in message


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
