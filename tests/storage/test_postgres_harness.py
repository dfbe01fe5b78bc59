"""The harness's PostgreSQL: a real server, and a separate empty database for each caller."""

from __future__ import annotations

import asyncpg

from tests.harness.postgres import PostgresServer

USER_TABLES = ("SELECT count(*) FROM pg_tables"
               " WHERE schemaname NOT IN ('pg_catalog', 'information_schema')")


async def test_a_fresh_database_answers_through_asyncpg(postgres_url: str) -> None:
    connection = await asyncpg.connect(postgres_url)
    try:
        version = await connection.fetchval("SELECT version()")
        database = await connection.fetchval("SELECT current_database()")
    finally:
        await connection.close()
    assert version.startswith("PostgreSQL ")
    assert postgres_url.endswith(f"/{database}")
    assert database != "postgres"


async def test_fresh_databases_are_distinct_and_start_empty(
        postgres_server: PostgresServer) -> None:
    first_url = await postgres_server.fresh_database()
    second_url = await postgres_server.fresh_database()
    first = await asyncpg.connect(first_url)
    second = await asyncpg.connect(second_url)
    try:
        assert await first.fetchval(USER_TABLES) == 0
        assert await second.fetchval(USER_TABLES) == 0
        await first.execute("CREATE TABLE notes (body text)")
        await first.execute("INSERT INTO notes VALUES ('only here')")
        assert await first.fetchval("SELECT body FROM notes") == "only here"
        assert await second.fetchval("SELECT to_regclass('notes')") is None
        assert await second.fetchval(USER_TABLES) == 0
    finally:
        await first.close()
        await second.close()
