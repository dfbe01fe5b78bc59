"""`threadline migrate`: copy a SQLite store into an empty PostgreSQL store, whole.

Every row keeps its id, so the links between tables (a ledger row's message, a delivery's
reply, a session's parent) stay exactly as they were; identity sequences then continue
after the largest id. Sessions go in parents first (a continuation needs its parent). The
copy is one transaction: it lands whole or not at all, and it is verified by counting the
rows of every table on both sides. The files kept beside the SQLite file (attachments and
saved tool outputs) go on the database's shelf in the same transaction.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg

from storage.errors import StoreError
from storage.postgres import files
from storage.postgres.queries import search_text
from storage.postgres.store import PostgresSessionStore
from storage.rows import decode_message
from storage.sqlite import SqliteSessionStore
from storage.urls import mask_url, scrub

BATCH = 5_000  # rows read from SQLite and copied to PostgreSQL at a time
_RUN_KEY = "run:active"  # the SQLite store's crash marker means nothing elsewhere

_SESSIONS = ("id, chat_key, parent_session_id, kind, end_reason, started_at, ended_at, model, system_prompt,"
             " title, compression_count, engine_state, last_prompt_tokens")
_MESSAGES = ("id, session_id, seq, role, content, content_format, tool_calls, tool_call_id,"
             " tool_name, extra, tokens, created_at, platform_message_id, answered, sender_id,"
             " sender_name")
# (table, columns copied; the order in which foreign keys allow them)
TABLES: tuple[tuple[str, str], ...] = (
    ("sessions", _SESSIONS),
    ("messages", _MESSAGES),
    ("usage", "id, session_id, model, purpose, input, output, cache_read, cache_write,"
              " reasoning, at"),
    ("inbound", "id, platform, chat_id, message_id, chat_key, text, sender_id, sender_name,"
                " received_at, status, message_row_id, extra, reply_row_id, attempts"),
    ("chats", "chat_key, session_id, updated_at"),
    ("deliveries", "inbound_id, chunk, reply_row_id, text, entities, status,"
                   " platform_message_id, sent_at, sending, maybe_sent"),
    ("settings", "key, value, updated_at"),
    ("chat_moves", "platform, old_chat_id, new_chat_id, moved_at"),
    ("previews", "inbound_id, position, platform_message_id"),
    ("observed", "id, platform, chat_key, message_id, sender_id, sender_name, text,"
                 " received_at"),
    # Spend so far (budgets); holds belong to turns running now, and none runs during a copy.
    ("spend_counters", "key, usd, tokens"),
)
_IDENTITIES = ("messages", "usage", "inbound", "observed")
FILE_DIRS = ("attachments", "tool_outputs")  # beside the file; their namespaces on the shelf


@dataclass(frozen=True)
class Copied:
    counts: dict[str, int]  # rows per table, equal on both sides


def _batches(db: sqlite3.Connection, sql: str) -> Iterator[list[tuple[Any, ...]]]:
    cursor = db.execute(sql)
    while rows := cursor.fetchmany(BATCH):
        yield rows


def _with_search_text(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """A messages row plus what PostgreSQL's search indexes of it."""
    message = decode_message((row[3], row[4], row[5], row[6], row[7], row[8], row[9]))
    return (*row, search_text(message))


async def _copy_table(db: sqlite3.Connection, con: asyncpg.Connection, table: str,
                      columns: str) -> None:
    names = [c.strip() for c in columns.split(",")]
    where = f" WHERE key <> '{_RUN_KEY}'" if table == "settings" else ""
    convert: Callable[[tuple[Any, ...]], tuple[Any, ...]] = tuple
    if table == "messages":
        names.append("search_text")
        convert = _with_search_text
    batches = _batches(db, f"SELECT {columns} FROM {table}{where} ORDER BY 1")
    if table == "sessions":
        batches = _parents_first(db.execute(f"SELECT {columns} FROM sessions").fetchall())
    for rows in batches:
        await con.copy_records_to_table(table, records=[convert(r) for r in rows],
                                        columns=names)


def _parents_first(sessions: list[tuple[Any, ...]]) -> Iterator[list[tuple[Any, ...]]]:
    """Sessions (id first, parent third) ordered so every parent precedes its children."""
    children: dict[Any, list[tuple[Any, ...]]] = {}
    for row in sessions:
        children.setdefault(row[2], []).append(row)
    known = {row[0] for row in sessions}
    # Roots, and any session whose parent is missing (the copy then fails on its link).
    order = [row for parent, rows in children.items() if parent is None or parent not in known
             for row in rows]
    for row in order:  # grows while it is walked: a breadth-first walk down the chains
        order.extend(children.get(row[0], ()))
    for start in range(0, len(order), BATCH):
        yield order[start:start + BATCH]


async def _count(con: asyncpg.Connection, table: str) -> int:
    where = f" WHERE key <> '{_RUN_KEY}'" if table == "settings" else ""
    return int(await con.fetchval(f"SELECT COUNT(*) FROM {table}{where}"))


def _held_by(source: Path) -> int | None:
    """The pid of a gateway running on the file now (its run marker names a live process).
    A copy taken meanwhile would miss what it writes after, so the copy waits for it."""
    try:
        with closing(sqlite3.connect(f"file:{source}?mode=ro", uri=True)) as db:
            row = db.execute("SELECT value FROM settings WHERE key = ?", (_RUN_KEY,)).fetchone()
    except sqlite3.Error:
        return None  # a file from before the marker: nothing runs on it with us
    pid = int(row[0]) if row and str(row[0]).isdigit() else None
    if pid is None or pid == os.getpid():
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None  # the marker of a run that crashed
    except PermissionError:
        pass  # alive, as another user
    return pid


async def copy_store(source: Path, target_url: str) -> Copied:
    """Copy the SQLite store at `source` (see `parse_source`) into the empty PostgreSQL
    database at `target_url`. Refused while a gateway runs on the file."""
    pid = _held_by(source)
    if pid is not None:
        raise StoreError(f"{source} is in use by a running gateway (pid {pid}); stop it, "
                         "then migrate")
    try:
        return await _copy(source, target_url)
    except sqlite3.Error as exc:
        raise StoreError(f"reading {source} failed: {exc}") from None
    except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        raise StoreError(f"copying into {mask_url(target_url)} failed: "
                         f"{scrub(str(exc), target_url)}") from None


async def _copy(source: Path, target_url: str) -> Copied:
    async with SqliteSessionStore(source):  # brings an older file to the current schema
        pass
    target = PostgresSessionStore(target_url, max_connections=1)
    await target.initialize()  # creates the schema
    await target.shutdown()
    with closing(sqlite3.connect(f"file:{source}?mode=ro", uri=True)) as db:
        con = await asyncpg.connect(target_url)
        try:
            async with con.transaction():
                if await _count(con, "sessions"):
                    raise StoreError(f"{target.label} already holds sessions; migrate into an "
                                     "empty database")
                for table, columns in TABLES:
                    await _copy_table(db, con, table, columns)
                for table in _IDENTITIES:
                    await con.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'),"
                                      f" COALESCE((SELECT MAX(id) FROM {table}), 0) + 1, false)")
                counts = await _verify(db, con)
                counts["files"] = await _copy_files(source.parent, con)
        finally:
            await con.close()
    return Copied(counts)


async def _copy_files(home: Path, con: asyncpg.Connection) -> int:
    """The attachments and saved tool outputs beside the file go on the shared shelf
    (storage/postgres/files.py), under the refs the stored messages already use."""
    copied = 0
    for namespace in FILE_DIRS:
        root = home / namespace
        paths = await asyncio.to_thread(lambda r=root: sorted(p for p in r.glob("*/*")
                                                              if p.is_file()))
        for path in paths:
            if path.name.startswith("."):  # a write that never finished
                continue
            data = await asyncio.to_thread(path.read_bytes)
            await con.execute(files.PUT, f"{namespace}/{path.parent.name}/{path.name}", data,
                              path.stat().st_mtime)
            copied += 1
    return copied


async def _verify(db: sqlite3.Connection, con: asyncpg.Connection) -> dict[str, int]:
    counts: dict[str, int] = {}
    for table, _ in TABLES:
        where = f" WHERE key <> '{_RUN_KEY}'" if table == "settings" else ""
        expected = db.execute(f"SELECT COUNT(*) FROM {table}{where}").fetchone()[0]
        found = await _count(con, table)
        if found != expected:
            raise StoreError(f"copying {table} gave {found} rows, expected {expected}; "
                             "nothing was kept")
        counts[table] = found
    return counts


def parse_source(value: str) -> Path:
    """`sqlite:PATH` (or a plain path) as the SQLite file to copy; it must exist."""
    path = Path(value.removeprefix("sqlite:")).expanduser()
    if not path.is_file():
        raise StoreError(f"there is no SQLite store at {path}")
    return path


def summary(counts: Sequence[tuple[str, int]]) -> str:
    return ", ".join(f"{n:,} {table}" for table, n in counts)
