"""Building chains in a real store (SQLite or PostgreSQL), and looking at it from outside."""

from __future__ import annotations

import re
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import asyncpg

from storage.base import SessionStore
from storage.models import Compaction, NewMessage, SessionRecord, TurnRecord, UsageRecord
from storage.postgres import PostgresSessionStore
from storage.sqlite import SqliteSessionStore

CHAT = "telegram:42"


def msg(role: str, content: Any = "", **meta: Any) -> NewMessage:
    return NewMessage({"role": role, "content": content}, **meta)


def compacted_turn(label: str = "") -> TurnRecord:
    return TurnRecord(
        before=(msg("user", f"question {label}"), msg("assistant", f"answer {label}")),
        compaction=Compaction(messages=(msg("system", "sys"), msg("user", f"summary {label}")),
                              engine_state={"previous_summary": label}),
        usage=(UsageRecord("m", "summary", input_tokens=10, output_tokens=2),))


async def root(store: SessionStore, chat: str = CHAT) -> SessionRecord:
    return await store.create_root_session(chat, model="gpt-x", system_prompt="be brief",
                                           system_message=msg("system", "be brief"))


async def grow_chain(store: SessionStore, depth: int) -> list[str]:
    ids = [(await root(store)).id]
    for i in range(depth):
        ids.append((await store.record_turn(ids[-1], compacted_turn(str(i)))).id)
    return ids


def raw(store: SqliteSessionStore) -> sqlite3.Connection:
    """A second, plain connection: what another process would see."""
    return sqlite3.connect(store.path, isolation_level=None)


def snapshot(store: SqliteSessionStore) -> dict[str, Any]:
    with raw(store) as db:
        return {table: db.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall()
                for table in ("sessions", "messages", "usage", "inbound", "chats")}


class Backend:
    """One store backend under the contract suite (tests/storage/conftest.py).

    `prepare()` picks a fresh database (a file in tmp_path, or a new database on the
    session's PostgreSQL server); `store()` opens a store on it (again: another process
    on the same database); `query()` reads it directly, as another client would, with `?`
    placeholders on both backends.
    """

    def __init__(self, name: str, tmp_path: Path, server: Any = None) -> None:
        self.name = name
        self.path = tmp_path / "threadline.db"
        self.server = server
        self.url: str | None = None

    async def prepare(self) -> None:
        if self.name == "postgres" and self.url is None:
            self.url = await self.server.fresh_database()

    def store(self, **kw: Any) -> SessionStore:
        if self.name == "sqlite":
            return SqliteSessionStore(self.path, **kw)
        assert self.url is not None, "prepare() first"
        return PostgresSessionStore(self.url, **kw)

    async def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        if self.name == "sqlite":
            with closing(sqlite3.connect(self.path, isolation_level=None)) as db:
                return [tuple(row) for row in db.execute(sql, params)]
        numbered = iter(range(1, sql.count("?") + 1))
        con = await asyncpg.connect(self.url)
        try:
            found = await con.fetch(re.sub(r"\?", lambda _: f"${next(numbered)}", sql), *params)
            return [tuple(row) for row in found]
        finally:
            await con.close()

    async def snapshot(self) -> dict[str, Any]:
        return {table: await self.query(f"SELECT * FROM {table} ORDER BY 1")
                for table in ("sessions", "messages", "usage", "inbound", "chats")}
