"""Building chains in a real SQLite store, and looking at its file from outside."""

from __future__ import annotations

import sqlite3
from typing import Any

from storage.models import Compaction, NewMessage, SessionRecord, TurnRecord, UsageRecord
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


async def root(store: SqliteSessionStore, chat: str = CHAT) -> SessionRecord:
    return await store.create_root_session(chat, model="gpt-x", system_prompt="be brief",
                                           system_message=msg("system", "be brief"))


async def grow_chain(store: SqliteSessionStore, depth: int) -> list[str]:
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
