"""Every SQL statement of the SQLite store, as text and as functions that run on an open
connection inside the store's transaction. `store.py` owns the connection, the lock and
the retries; `rows.py` turns rows into values; `continuation.py` is the one compaction
transaction."""

from __future__ import annotations

import functools
import json
import sqlite3
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from storage.errors import ContinuationConflict, StoreError
from storage.models import NewMessage, OutChunk, SessionRecord, StoredMessage, UsageRecord
from storage.rows import (
    FIELD_COUNT,
    INBOUND_COLUMNS,
    MAX_CHAIN_DEPTH,
    MESSAGE_COLUMNS,
    MESSAGE_FIELDS,
    SESSION_COLUMNS,
    SESSION_COLUMNS_OF,
    dumps,
    inbound_links,
    message_values,
    new_session_id,
    session_record,
)
from storage.sqlite import spending

T = TypeVar("T")

# --- compression walks -------------------------------------------------------------------
# A step follows a kind='compression' child of a session that ended with
# end_reason='compression'; the depth bound makes even a corrupt cycle terminate. The step
# is two index lookups written as scalar subqueries, not joins: for a join SQLite builds a
# Bloom filter over the whole table at every step, which made each step cost O(sessions).
# The last row of a walk has id NULL (no further step); readers skip it.
_DOWN = """down(id, depth) AS (
    SELECT id, 0 FROM start
    UNION ALL
    SELECT (SELECT c.id FROM sessions AS c
            WHERE c.parent_session_id = down.id AND c.kind = 'compression'
              AND (SELECT p.end_reason FROM sessions AS p WHERE p.id = down.id)
                  = 'compression'),
           down.depth + 1
    FROM down WHERE down.id IS NOT NULL AND down.depth < :max_depth)"""
_UP = """up(id, depth) AS (
    SELECT :sid, 0
    UNION ALL
    SELECT (SELECT s.parent_session_id FROM sessions AS s
            WHERE s.id = up.id AND s.kind = 'compression'
              AND (SELECT p.end_reason FROM sessions AS p WHERE p.id = s.parent_session_id)
                  = 'compression'),
           up.depth + 1
    FROM up WHERE up.id IS NOT NULL AND up.depth < :max_depth)"""
# Prefix defining `tip(id, depth)`, the deepest step from a seed query (format `start`).
_TIP = ("WITH RECURSIVE start(id) AS ({start}), " + _DOWN
        + ", tip(id, depth) AS (SELECT id, depth FROM down WHERE id IS NOT NULL"
        " ORDER BY depth DESC LIMIT 1) ")
# The tip from a seed query (format `start`): yields (id, depth) of the deepest step.
TIP_FROM = _TIP + "SELECT id, depth FROM tip"
# Prefix defining `chain(id, depth)`: every session of the chain holding :sid, root first.
CHAIN = (f"WITH RECURSIVE {_UP}, start(id) AS (SELECT id FROM up WHERE id IS NOT NULL"
         " ORDER BY depth DESC LIMIT 1),"
         f" {_DOWN}, chain(id, depth) AS (SELECT id, MIN(depth) FROM down WHERE id IS NOT NULL"
         " GROUP BY id) ")

# The chat's current session, followed to its compression tip, as a session row.
LIVE_SESSION = (_TIP.format(start="SELECT session_id FROM chats WHERE chat_key = :key")
                + f"SELECT {SESSION_COLUMNS} FROM tip JOIN sessions AS s ON s.id = tip.id")
ROWS_PER_INSERT = 500  # 13 parameters a row: well under SQLite's 32,766 per statement
IN_IDS = "IN (SELECT value FROM json_each(?))"  # a list of ids bound as one JSON parameter


def fts_match(query: str) -> str | None:
    """User text as quoted FTS5 terms, so `PELICAN-7731`, `a.b` or `foo:` are plain text.

    Terms without a letter or digit are dropped: the tokenizer would index nothing for them.
    """
    terms = [t for t in query.split() if any(ch.isalnum() for ch in t)]
    return " ".join('"' + t.replace('"', '""') + '"' for t in terms) or None


# --- statements (the caller holds the transaction) ----------------------------------------
# These run in the store's database thread, inside the unit of work the event loop handed
# it (storage/sqlite/connection.py): a whole store call is one trip to that thread.
def fetch_one(db: sqlite3.Connection, sql: str, params: Any = ()) -> Any:
    return db.execute(sql, params).fetchone()


def fetch_all(db: sqlite3.Connection, sql: str, params: Any,
              convert: Callable[[Any], T]) -> list[T]:
    return [convert(row) for row in db.execute(sql, params)]


def load_session(db: sqlite3.Connection, session_id: str) -> SessionRecord | None:
    row = fetch_one(db, f"SELECT {SESSION_COLUMNS} FROM sessions AS s WHERE s.id = ?",
                          (session_id,))
    return session_record(row) if row else None


def require_session(db: sqlite3.Connection, session_id: str) -> SessionRecord:
    record = load_session(db, session_id)
    if record is None:
        raise StoreError(f"no session {session_id!r}")
    return record


def new_root(db: sqlite3.Connection, chat_key: str, model: str | None,
                   system_prompt: str | None, system_message: NewMessage | None
                   ) -> SessionRecord:
    """Insert a root session (with its system message at seq 0) and make it the chat's."""
    now = time.time()
    session_id = new_session_id(now)
    db.execute(
        "INSERT INTO sessions (id, chat_key, kind, started_at, model, system_prompt)"
        " VALUES (?, ?, 'root', ?, ?, ?)", (session_id, chat_key, now, model, system_prompt))
    if system_message is not None:
        append(db, session_id, [system_message], now)
    db.execute(
        "INSERT INTO chats (chat_key, session_id, updated_at) VALUES (?, ?, ?)"
        " ON CONFLICT (chat_key) DO UPDATE SET session_id = excluded.session_id,"
        " updated_at = excluded.updated_at", (chat_key, session_id, now))
    return require_session(db, session_id)


def end_reason_of(db: sqlite3.Connection, session_id: str) -> str | None:
    """None while the session is live; StoreError when there is no such session."""
    row = fetch_one(db, "SELECT end_reason FROM sessions WHERE id = ?", (session_id,))
    if row is None:
        raise StoreError(f"no session {session_id!r}")
    return row[0]


def require_open(db: sqlite3.Connection, session_id: str, *,
                 continuing: bool = False, live: bool = False) -> None:
    """Check, inside the transaction, that the session may take new messages.

    A continued session (ended by compression) takes none: its continuation does. A session
    ended otherwise (reset, expired) may still receive the end of its last turn, but only
    a live session without a continuation may be continued, and new messages (`live`) go
    only to a session that has not ended.
    """
    row = fetch_one(db, "SELECT s.end_reason, EXISTS (SELECT 1 FROM sessions AS c"
                          " WHERE c.parent_session_id = s.id AND c.kind = 'compression')"
                          " FROM sessions AS s WHERE s.id = ?", (session_id,))
    if row is None:
        raise StoreError(f"no session {session_id!r}")
    end_reason, continued = row
    if end_reason == "compression" or ((continuing or live) and end_reason is not None) \
            or (continuing and continued):
        raise ContinuationConflict(
            f"session {session_id} was already continued or has ended ({end_reason})")


@functools.cache
def _insert_sql(rows: int) -> str:
    """Insert `rows` messages after the session's last seq (?1); returns (id, seq) of each."""
    values = ", ".join(f"({pos}, {', '.join('?' * FIELD_COUNT)})" for pos in range(rows))
    return (f"WITH next(seq) AS (SELECT COALESCE(MAX(seq) + 1, 0) FROM messages"
            f" WHERE session_id = ?1), batch(pos, {MESSAGE_FIELDS}) AS (VALUES {values})"
            f" INSERT INTO messages (session_id, seq, {MESSAGE_FIELDS})"
            f" SELECT ?1, next.seq + batch.pos, {MESSAGE_FIELDS} FROM next, batch"
            " ORDER BY batch.pos RETURNING id, seq")


def append(db: sqlite3.Connection, session_id: str, messages: Sequence[NewMessage],
                 now: float) -> list[StoredMessage]:
    stored: list[StoredMessage] = []
    for start in range(0, len(messages), ROWS_PER_INSERT):
        batch = messages[start:start + ROWS_PER_INSERT]
        params: list[Any] = [session_id]
        for m in batch:
            params.extend(message_values(m, now))
        # RETURNING yields rows in no promised order: seq puts them back in batch order.
        rows = sorted(db.execute(_insert_sql(len(batch)), params).fetchall(),
                      key=lambda row: row[1])
        stored.extend(StoredMessage(id=row_id, session_id=session_id, seq=seq,
                                    message=dict(m.message), tokens=m.tokens, created_at=now,
                                    platform_message_id=m.platform_message_id,
                                    answered=m.answered, sender_id=m.sender_id,
                                    sender_name=m.sender_name)
                      for m, (row_id, seq) in zip(batch, rows, strict=True))
    return stored


_OPEN = "status IN ('pending', 'taken')"


FINISH_INBOUND = f"UPDATE inbound SET status = ? WHERE id {IN_IDS} AND {_OPEN}"
RETRY_INBOUND = f"UPDATE inbound SET attempts = attempts + 1 WHERE id {IN_IDS} AND {_OPEN}"
UNDO_ATTEMPT = (f"UPDATE inbound SET attempts = attempts - 1 WHERE id {IN_IDS}"
                " AND status = 'taken' AND attempts > 0")


def mark_inbound(db: sqlite3.Connection, answered: Sequence[int],
                       failed: Sequence[int]) -> None:
    """Finish open rows: answered (a trigger marks their message rows in live sessions) or
    failed. A finished row never changes again, so a late stop cannot turn a delivered
    reply into a failure, and an ended session's messages are never touched."""
    for status, ids in (("answered", answered), ("failed", failed)):
        if ids:
            db.execute(FINISH_INBOUND, (status, json.dumps(list(ids))))


def set_reply(db: sqlite3.Connection, inbound_ids: Sequence[int],
                    reply: StoredMessage | None) -> None:
    """Point taken rows at their stored, not yet delivered, reply."""
    if inbound_ids and reply is not None:
        db.execute(f"UPDATE inbound SET reply_row_id = ? WHERE id {IN_IDS}"
                         " AND status = 'taken'", (reply.id, json.dumps(list(inbound_ids))))


def take_inbound(db: sqlite3.Connection, inbound_ids: Sequence[int],
                 stored: Sequence[StoredMessage], texts: Sequence[str] | None = None) -> None:
    """Mark pending rows taken, each linked to the message carrying its platform message id,
    else to the message at its position (as many messages as rows), else to the last one."""
    found = db.execute(
        f"SELECT id, message_id, status, text FROM inbound WHERE id {IN_IDS}",
        (json.dumps(list(inbound_ids)),)).fetchall()
    links = inbound_links(inbound_ids, found, stored, texts)
    if links:
        db.executemany("UPDATE inbound SET status = 'taken', message_row_id = ?,"
                       " attempts = attempts + 1 WHERE id = ?", links)


def insert_usage(db: sqlite3.Connection, session_id: str,
                       usage: Sequence[UsageRecord], now: float) -> None:
    """Store usage rows, and add them to their spend counters in the same transaction."""
    if not usage:
        return
    db.executemany(
        "INSERT INTO usage (session_id, model, purpose, input, output, cache_read,"
        " cache_write, reasoning, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [(session_id, u.model, u.purpose, u.input_tokens, u.output_tokens,
          u.cache_read_tokens, u.cache_write_tokens, u.reasoning_tokens, now) for u in usage])
    spending.add(db, usage)


def save_state(db: sqlite3.Connection, session_id: str, state: dict[str, Any] | None,
                     last_prompt_tokens: int | None) -> SessionRecord:
    """Set whichever of the two is given (None keeps it); return the session as it is now.

    One statement either way: with nothing to set, the UPDATE rewrites the row unchanged and
    still reads it back. StoreError when there is no such session.
    """
    row = fetch_one(
        db, "UPDATE sessions SET engine_state = COALESCE(?, engine_state),"
        " last_prompt_tokens = COALESCE(?, last_prompt_tokens) WHERE id = ?"
        f" RETURNING {SESSION_COLUMNS_OF.format(s='sessions')}",
        (None if state is None else dumps(state), last_prompt_tokens, session_id))
    if row is None:
        raise StoreError(f"no session {session_id!r}")
    return session_record(row)


# --- reads and single-statement writes the store composes ------------------------------------
SESSION_BY_CHAT = (f"SELECT {SESSION_COLUMNS} FROM sessions AS s"
                   " WHERE :key IS NULL OR s.chat_key = :key"
                   " ORDER BY s.started_at DESC, s.id DESC LIMIT :limit")
CHAIN_SESSIONS = (f"{CHAIN} SELECT {SESSION_COLUMNS} FROM chain"
                  " JOIN sessions AS s ON s.id = chain.id ORDER BY chain.depth")
TIP = TIP_FROM.format(start="SELECT :sid")
END_SESSION = ("UPDATE sessions SET end_reason = ?, ended_at = ?"
               " WHERE id = ? AND end_reason IS NULL")
HISTORY = f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_id = ? ORDER BY seq"
MESSAGE_BY_ID = f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE id = ?"
SESSION_PAGE = (f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_id = ? AND seq >= ?"
                " ORDER BY seq LIMIT ?")
SEARCH = ("SELECT m.session_id, s.chat_key, m.seq, m.role,"
          " snippet(messages_fts, 0, '[', ']', '…', 16), m.created_at"
          " FROM messages_fts JOIN messages AS m ON m.id = messages_fts.rowid"
          " JOIN sessions AS s ON s.id = m.session_id"
          " WHERE messages_fts MATCH :match AND (:key IS NULL OR s.chat_key = :key)"
          " ORDER BY rank, m.id LIMIT :limit")
INGEST = ("INSERT INTO inbound (platform, chat_id, message_id, chat_key, text, sender_id,"
          " sender_name, received_at, extra) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
          " ON CONFLICT DO NOTHING RETURNING id")
_ONE_INBOUND = "WHERE platform = ? AND chat_id = ? AND message_id = ?"
FIND_INBOUND = f"SELECT {INBOUND_COLUMNS} FROM inbound {_ONE_INBOUND}"
INBOUND_BY_IDS = f"SELECT {INBOUND_COLUMNS} FROM inbound WHERE id {IN_IDS} ORDER BY received_at, id"
LATEST_INBOUND = (f"SELECT {INBOUND_COLUMNS} FROM inbound WHERE id IN"
                  " (SELECT MAX(id) FROM inbound WHERE platform = ? GROUP BY chat_key)")
OPEN_INBOUND = (f"SELECT {INBOUND_COLUMNS} FROM inbound WHERE {_OPEN}"
                " AND (?1 IS NULL OR chat_key = ?1) ORDER BY received_at, id")
# The columns `rows.usage_totals` reads, summed over the selected usage rows.
_USAGE_SUMS = ("COALESCE(SUM(input), 0), COALESCE(SUM(output), 0),"
               " COALESCE(SUM(cache_read), 0), COALESCE(SUM(cache_write), 0),"
               " COALESCE(SUM(reasoning), 0), COUNT(*)")
_CHAIN_USAGE = "FROM usage WHERE session_id IN (SELECT id FROM chain)"
USAGE_TOTALS = f"{CHAIN} SELECT {_USAGE_SUMS} {_CHAIN_USAGE}"
USAGE_BY_MODEL = f"{CHAIN} SELECT model, {_USAGE_SUMS} {_CHAIN_USAGE} GROUP BY model"
USAGE_BY_SESSION = (f"SELECT session_id, {_USAGE_SUMS} FROM usage WHERE session_id {IN_IDS}"
                    " GROUP BY session_id")


def chain_params(session_id: str) -> dict[str, Any]:
    return {"sid": session_id, "max_depth": MAX_CHAIN_DEPTH}


def live_session(db: sqlite3.Connection, chat_key: str) -> SessionRecord | None:
    """The chat's current session followed to its tip; None when it has none or it ended."""
    row = fetch_one(db, LIVE_SESSION, {"key": chat_key, "max_depth": MAX_CHAIN_DEPTH})
    record = session_record(row) if row else None
    return record if record is not None and record.live else None


def update_pending_text(db: sqlite3.Connection, key: tuple[str, str, str],
                              text: str) -> str | None:
    """An edit: replace the text while the row is pending; return the status found."""
    row = fetch_one(db, f"SELECT status FROM inbound {_ONE_INBOUND}", key)
    if row is not None and row[0] == "pending":
        db.execute(f"UPDATE inbound SET text = ? {_ONE_INBOUND}", (text, *key))
    return row[0] if row else None


# --- deliveries ---------------------------------------------------------------------------------
DELIVERY_COLUMNS = "inbound_id, chunk, text, entities, status, platform_message_id"
DELIVERIES_OF = f"SELECT {DELIVERY_COLUMNS} FROM deliveries WHERE inbound_id = ? ORDER BY chunk"
ANY_DELIVERY = "SELECT 1 FROM deliveries WHERE inbound_id = ? LIMIT 1"
MARK_DELIVERED = ("UPDATE deliveries SET status = ?, platform_message_id = ?, sent_at = ?,"
                  " sending = 0"
                  " WHERE inbound_id = ? AND chunk = ? AND status = 'pending'")
UNDELIVERED = (f"SELECT DISTINCT reply_row_id FROM deliveries WHERE reply_row_id {IN_IDS}"
               " AND status = 'pending'")


def insert_delivery(db: sqlite3.Connection, inbound_id: int, reply_row_id: int | None,
                    chunks: Sequence[OutChunk]) -> None:
    """Record a reply's chunks as pending (a redelivered turn keeps the first record); a
    chunk that replaces a streamed preview carries the preview's message id. The first new
    message is marked `sending` already: it is sent right after this commits, and marking
    it here saves a trip (a crash before it is sent only makes its resend a maybe)."""
    if not chunks:
        return
    db.executemany(
        "INSERT INTO deliveries (inbound_id, chunk, reply_row_id, text, entities,"
        " platform_message_id, sending) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
        [(inbound_id, i, reply_row_id, c.text, dumps(list(c.entities)), c.edit_of,
          int(i == 0 and c.edit_of is None)) for i, c in enumerate(chunks)])


# Before a send: a send begun before without an answer makes this one a maybe-duplicate.
SENDING = ("UPDATE deliveries SET maybe_sent = max(maybe_sent, sending), sending = 1"
           " WHERE inbound_id = ? AND chunk = ? AND status = 'pending' RETURNING 1")
NOT_SENT = "UPDATE deliveries SET sending = 0 WHERE inbound_id = ? AND chunk = ?"
CHAT_MOVES = "SELECT platform, old_chat_id, new_chat_id FROM chat_moves"
ADD_PREVIEW = ("INSERT OR REPLACE INTO previews (inbound_id, position, platform_message_id)"
               " VALUES (?, ?, ?)")
PREVIEWS_OF = (f"SELECT inbound_id, platform_message_id FROM previews WHERE inbound_id {IN_IDS}"
               " ORDER BY inbound_id, position")
FORGET_PREVIEWS = f"DELETE FROM previews WHERE inbound_id {IN_IDS}"


def move_chat(db: sqlite3.Connection, platform: str, old_chat_id: str, new_chat_id: str,
              now: float) -> None:
    """The chat continues under its new id: the move noted, its sessions and ledger rows
    under the new key (unless the new key already has a conversation of its own)."""
    old, new = f"{platform}:{old_chat_id}", f"{platform}:{new_chat_id}"
    db.execute("INSERT OR REPLACE INTO chat_moves (platform, old_chat_id, new_chat_id,"
               " moved_at) VALUES (?, ?, ?, ?)", (platform, old_chat_id, new_chat_id, now))
    if db.execute("SELECT 1 FROM chats WHERE chat_key = ?", (new,)).fetchone() is None:
        db.execute("UPDATE sessions SET chat_key = ? WHERE chat_key = ?", (new, old))
        db.execute("UPDATE chats SET chat_key = ? WHERE chat_key = ?", (new, old))
    db.execute("UPDATE inbound SET chat_key = ? WHERE chat_key = ?", (new, old))


GET_SETTING = "SELECT value FROM settings WHERE key = ?"
END_RUN = "UPDATE settings SET value = '', updated_at = ? WHERE key = ? AND value = ?"
PUT_SETTING = ("INSERT INTO settings(key, value, updated_at) VALUES (?, ?, ?) "
               "ON CONFLICT(key) DO UPDATE SET value = excluded.value, "
               "updated_at = excluded.updated_at")

# Each chat's live session and when the chat last spoke: its last inbound message, or the
# session's start when that is later (a fresh session after /new).
CHAT_ACTIVITY = """
    SELECT c.chat_key, s.id, MAX(s.started_at, COALESCE(
        (SELECT MAX(i.received_at) FROM inbound AS i WHERE i.chat_key = c.chat_key), 0))
    FROM chats AS c JOIN sessions AS s ON s.id = c.session_id
    WHERE s.end_reason IS NULL AND (?1 IS NULL OR c.chat_key = ?1)
    ORDER BY c.chat_key"""
