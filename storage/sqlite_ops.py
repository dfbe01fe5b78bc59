"""Statements that run on an open connection inside the store's transactions, and the row
codecs they share. `SqliteSessionStore` owns the connection, the lock and the retries."""

from __future__ import annotations

import dataclasses
import functools
import json
import secrets
import sqlite3
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import aiosqlite

from storage.models import (
    Compaction,
    ContinuationConflict,
    InboundRecord,
    NewMessage,
    SearchHit,
    SessionRecord,
    StoredMessage,
    StoreError,
    UsageRecord,
)

T = TypeVar("T")

MAX_CHAIN_DEPTH = 10_000

# --- compression walks -------------------------------------------------------------------
# A step follows a kind='compression' child of a session that ended with
# end_reason='compression'. UNION plus the depth bound make even a corrupt cycle terminate.
_DOWN = """down(id, depth) AS (
    SELECT id, 0 FROM start
    UNION
    SELECT c.id, down.depth + 1 FROM down
    JOIN sessions AS p ON p.id = down.id AND p.end_reason = 'compression'
    JOIN sessions AS c ON c.parent_session_id = p.id AND c.kind = 'compression'
    WHERE down.depth < :max_depth)"""
_UP = """up(id, depth) AS (
    SELECT :sid, 0
    UNION
    SELECT p.id, up.depth + 1 FROM up
    JOIN sessions AS s ON s.id = up.id AND s.kind = 'compression'
    JOIN sessions AS p ON p.id = s.parent_session_id AND p.end_reason = 'compression'
    WHERE up.depth < :max_depth)"""
# Prefix defining `tip(id, depth)`, the deepest step from a seed query (format `start`).
_TIP = ("WITH RECURSIVE start(id) AS ({start}), " + _DOWN
        + ", tip(id, depth) AS (SELECT id, depth FROM down ORDER BY depth DESC LIMIT 1) ")
# The tip from a seed query (format `start`): yields (id, depth) of the deepest step.
TIP_FROM = _TIP + "SELECT id, depth FROM tip"
# Prefix defining `chain(id, depth)`: every session of the chain holding :sid, root first.
CHAIN = (f"WITH RECURSIVE {_UP}, start(id) AS (SELECT id FROM up ORDER BY depth DESC LIMIT 1),"
         f" {_DOWN}, chain(id, depth) AS (SELECT id, MIN(depth) FROM down GROUP BY id) ")

# --- row codecs --------------------------------------------------------------------------
_TEXT, _JSON, _NONE, _ABSENT = range(4)  # messages.content_format

# A template over the table's name `s`: a RETURNING clause cannot use a table alias.
_SESSION_COLUMNS_OF = """{s}.id, {s}.chat_key, {s}.parent_session_id, {s}.kind, {s}.end_reason,
    {s}.started_at, {s}.ended_at, {s}.model, {s}.system_prompt, {s}.title, {s}.compression_count,
    {s}.engine_state, {s}.last_prompt_tokens,
    (SELECT COUNT(*) FROM messages AS m WHERE m.session_id = {s}.id),
    (SELECT COALESCE(SUM(u.input), 0) FROM usage AS u WHERE u.session_id = {s}.id),
    (SELECT COALESCE(SUM(u.output), 0) FROM usage AS u WHERE u.session_id = {s}.id)"""
SESSION_COLUMNS = _SESSION_COLUMNS_OF.format(s="s")
# The chat's current session, followed to its compression tip, as a session row.
LIVE_SESSION = (_TIP.format(start="SELECT session_id FROM chats WHERE chat_key = :key")
                + f"SELECT {SESSION_COLUMNS} FROM tip JOIN sessions AS s ON s.id = tip.id")
INBOUND_COLUMNS = """id, platform, chat_id, message_id, chat_key, text, sender_id, sender_name,
    received_at, status, message_row_id, extra, reply_row_id"""
# Everything of a messages row but its id, session and position.
_MESSAGE_FIELDS = """role, content, content_format, tool_calls, tool_call_id, tool_name, extra, tokens,
    created_at, platform_message_id, answered, sender_id, sender_name"""
MESSAGE_COLUMNS = f"id, session_id, seq, {_MESSAGE_FIELDS}"
_FIELD_COUNT = _MESSAGE_FIELDS.count(",") + 1
_ROWS_PER_INSERT = 500  # 13 parameters a row: well under SQLite's 32,766 per statement
IN_IDS = "IN (SELECT value FROM json_each(?))"  # a list of ids bound as one JSON parameter


def session_record(row: Sequence[Any]) -> SessionRecord:
    values = list(row)
    values[11] = json.loads(values[11]) if values[11] else {}
    return SessionRecord(*values)


def message_values(new: NewMessage, now: float) -> tuple[Any, ...]:
    """A messages row's `_MESSAGE_FIELDS`, split so that `decode_message` rebuilds the dict."""
    rest = dict(new.message)
    role = rest.pop("role", None)
    if not isinstance(role, str):
        raise StoreError(f"a message needs a string 'role', got {role!r}")
    if "content" not in rest:
        content, content_format = None, _ABSENT
    elif (value := rest.pop("content")) is None:
        content, content_format = None, _NONE
    elif isinstance(value, str):
        content, content_format = value, _TEXT
    else:
        content, content_format = _dumps(value), _JSON
    tool_calls = _dumps(rest.pop("tool_calls")) if "tool_calls" in rest else None
    tool_call_id = rest.pop("tool_call_id") if isinstance(rest.get("tool_call_id"), str) else None
    name = rest.pop("name") if isinstance(rest.get("name"), str) else None
    answered = None if new.answered is None else int(new.answered)
    return (role, content, content_format, tool_calls, tool_call_id, name,
            _dumps(rest) if rest else None, new.tokens, now, new.platform_message_id,
            answered, new.sender_id, new.sender_name)


def decode_message(row: Sequence[Any]) -> dict[str, Any]:
    """The dict from (role, content, content_format, tool_calls, tool_call_id, name, extra)."""
    role, content, content_format, tool_calls, tool_call_id, name, extra = row
    message: dict[str, Any] = {"role": role}
    if content_format == _TEXT:
        message["content"] = content
    elif content_format == _JSON:
        message["content"] = json.loads(content)
    elif content_format == _NONE:
        message["content"] = None
    if tool_calls is not None:
        message["tool_calls"] = json.loads(tool_calls)
    if tool_call_id is not None:
        message["tool_call_id"] = tool_call_id
    if name is not None:
        message["name"] = name
    if extra:
        message.update(json.loads(extra))
    return message


def stored_message(row: Sequence[Any]) -> StoredMessage:
    return StoredMessage(id=row[0], session_id=row[1], seq=row[2],
                         message=decode_message(row[3:10]), tokens=row[10], created_at=row[11],
                         platform_message_id=row[12],
                         answered=None if row[13] is None else bool(row[13]),
                         sender_id=row[14], sender_name=row[15])


def inbound_values(record: InboundRecord) -> tuple[Any, ...]:
    return (record.platform, record.chat_id, record.message_id, record.chat_key, record.text,
            record.sender_id, record.sender_name, record.received_at, _dumps(record.extra))


def inbound_record(row: Sequence[Any]) -> InboundRecord:
    values = list(row)
    values[11] = json.loads(values[11]) if values[11] else {}
    return InboundRecord(*values)


def search_hit(row: Sequence[Any]) -> SearchHit:
    return SearchHit(*row)


def fts_match(query: str) -> str | None:
    """User text as quoted FTS5 terms, so `PELICAN-7731`, `a.b` or `foo:` are plain text.

    Terms without a letter or digit are dropped: the tokenizer would index nothing for them.
    """
    terms = [t for t in query.split() if any(ch.isalnum() for ch in t)]
    return " ".join('"' + t.replace('"', '""') + '"' for t in terms) or None


def new_session_id(now: float) -> str:
    """Sortable by creation time, unique by its random tail: 20250101T120000123-9f1c2e3d4b5a."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now))
    return f"{stamp}{int(now * 1000) % 1000:03d}-{secrets.token_hex(6)}"


def _dumps(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise StoreError(f"cannot store a value that is not JSON: {exc}") from exc


# --- statements (the caller holds the transaction) ----------------------------------------
# Each `await` on the connection is a round-trip to its thread (~100 µs): helpers do in one
# statement what SQL allows (RETURNING, folded checks) and skip statements with nothing to do.
async def fetch_one(db: aiosqlite.Connection, sql: str, params: Any = ()) -> Any:
    rows = await db.execute_fetchall(sql, params)  # one round-trip; a cursor costs three
    return next(iter(rows), None)


async def fetch_all(db: aiosqlite.Connection, sql: str, params: Any,
                    convert: Callable[[Any], T]) -> list[T]:
    return [convert(row) for row in await db.execute_fetchall(sql, params)]


async def load_session(db: aiosqlite.Connection, session_id: str) -> SessionRecord | None:
    row = await fetch_one(db, f"SELECT {SESSION_COLUMNS} FROM sessions AS s WHERE s.id = ?",
                          (session_id,))
    return session_record(row) if row else None


async def require_session(db: aiosqlite.Connection, session_id: str) -> SessionRecord:
    record = await load_session(db, session_id)
    if record is None:
        raise StoreError(f"no session {session_id!r}")
    return record


async def new_root(db: aiosqlite.Connection, chat_key: str, model: str | None,
                   system_prompt: str | None, system_message: NewMessage | None
                   ) -> SessionRecord:
    """Insert a root session (with its system message at seq 0) and make it the chat's."""
    now = time.time()
    session_id = new_session_id(now)
    await db.execute(
        "INSERT INTO sessions (id, chat_key, kind, started_at, model, system_prompt)"
        " VALUES (?, ?, 'root', ?, ?, ?)", (session_id, chat_key, now, model, system_prompt))
    if system_message is not None:
        await append(db, session_id, [system_message], now)
    await db.execute(
        "INSERT INTO chats (chat_key, session_id, updated_at) VALUES (?, ?, ?)"
        " ON CONFLICT (chat_key) DO UPDATE SET session_id = excluded.session_id,"
        " updated_at = excluded.updated_at", (chat_key, session_id, now))
    return await require_session(db, session_id)


async def end_reason_of(db: aiosqlite.Connection, session_id: str) -> str | None:
    """None while the session is live; StoreError when there is no such session."""
    row = await fetch_one(db, "SELECT end_reason FROM sessions WHERE id = ?", (session_id,))
    if row is None:
        raise StoreError(f"no session {session_id!r}")
    return row[0]


async def require_open(db: aiosqlite.Connection, session_id: str, *,
                       continuing: bool = False) -> None:
    """Check, inside the transaction, that the session may take new messages.

    A continued session (ended by compression) takes none: its continuation does. A session
    ended otherwise (reset, expired) may still receive the end of its last turn, but only
    a live session without a continuation may be continued.
    """
    row = await fetch_one(db, "SELECT s.end_reason, EXISTS (SELECT 1 FROM sessions AS c"
                          " WHERE c.parent_session_id = s.id AND c.kind = 'compression')"
                          " FROM sessions AS s WHERE s.id = ?", (session_id,))
    if row is None:
        raise StoreError(f"no session {session_id!r}")
    end_reason, continued = row
    if end_reason == "compression" or (continuing and (end_reason is not None or continued)):
        raise ContinuationConflict(
            f"session {session_id} was already continued or has ended ({end_reason})")


@functools.cache
def _insert_sql(rows: int) -> str:
    """Insert `rows` messages after the session's last seq (?1); returns (id, seq) of each."""
    values = ", ".join(f"({pos}, {', '.join('?' * _FIELD_COUNT)})" for pos in range(rows))
    return (f"WITH next(seq) AS (SELECT COALESCE(MAX(seq) + 1, 0) FROM messages"
            f" WHERE session_id = ?1), batch(pos, {_MESSAGE_FIELDS}) AS (VALUES {values})"
            f" INSERT INTO messages (session_id, seq, {_MESSAGE_FIELDS})"
            f" SELECT ?1, next.seq + batch.pos, {_MESSAGE_FIELDS} FROM next, batch"
            " ORDER BY batch.pos RETURNING id, seq")


async def append(db: aiosqlite.Connection, session_id: str, messages: Sequence[NewMessage],
                 now: float) -> list[StoredMessage]:
    stored: list[StoredMessage] = []
    for start in range(0, len(messages), _ROWS_PER_INSERT):
        batch = messages[start:start + _ROWS_PER_INSERT]
        params: list[Any] = [session_id]
        for m in batch:
            params.extend(message_values(m, now))
        # RETURNING yields rows in no promised order: seq puts them back in batch order.
        rows = sorted(await db.execute_fetchall(_insert_sql(len(batch)), params),
                      key=lambda row: row[1])
        stored.extend(StoredMessage(id=row_id, session_id=session_id, seq=seq,
                                    message=dict(m.message), tokens=m.tokens, created_at=now,
                                    platform_message_id=m.platform_message_id,
                                    answered=m.answered, sender_id=m.sender_id,
                                    sender_name=m.sender_name)
                      for m, (row_id, seq) in zip(batch, rows, strict=True))
    return stored


async def continue_session(db: aiosqlite.Connection, parent_id: str, compaction: Compaction,
                           now: float, turn_messages: int = 0) -> str:
    """End live `parent_id` by compression and create its continuation; returns the child id.

    The child copies chat key, model, system prompt and title, and counts one more
    compression; the chat moves to it. `turn_messages` is how many of the parent's last
    messages this turn's `before` appended (see Compaction.covers).
    """
    child_id = new_session_id(now)
    await db.execute("UPDATE sessions SET end_reason = 'compression', ended_at = ? WHERE id = ?",
                     (now, parent_id))
    try:
        await db.execute(
            "INSERT INTO sessions (id, chat_key, parent_session_id, kind, started_at, model,"
            " system_prompt, title, compression_count, engine_state)"
            " SELECT ?, chat_key, id, 'compression', ?, model, system_prompt, title,"
            " compression_count + 1, ? FROM sessions WHERE id = ?",
            (child_id, now, _dumps(compaction.engine_state), parent_id))
    except sqlite3.IntegrityError as exc:
        if "parent_session_id" in str(exc):  # sessions_one_continuation: a racing writer won
            raise ContinuationConflict(f"session {parent_id} was already continued") from exc
        raise
    parent_seqs = await _source_seqs(db, parent_id, compaction, turn_messages)
    copied = await _with_metadata(db, parent_id, compaction.messages, parent_seqs)
    stored = await append(db, child_id, copied, now)
    await _repoint_inbound(db, parent_id, stored, parent_seqs)
    if compaction.covers is not None:
        await _carry_over(db, parent_id, child_id, compaction, turn_messages)
    await db.execute("UPDATE chats SET session_id = ?, updated_at = ? WHERE session_id = ?"
                     " AND chat_key = (SELECT chat_key FROM sessions WHERE id = ?)",
                     (child_id, now, parent_id, parent_id))
    return child_id


async def _source_seqs(db: aiosqlite.Connection, parent_id: str, compaction: Compaction,
                       turn_messages: int) -> list[int | None]:
    """The parent seq each compaction message copies (None: a new message)."""
    if not any(s is not None for s in compaction.sources):
        return [None] * len(compaction.messages)
    covers = compaction.covers
    turn_start = 0
    if covers is not None:  # this turn's `before` starts after everything else stored
        row = await fetch_one(db, "SELECT COUNT(*) FROM messages WHERE session_id = ?",
                              (parent_id,))
        turn_start = row[0] - turn_messages
    seqs: list[int | None] = []
    for source in compaction.sources:
        if source is None or covers is None or source < covers:
            seqs.append(source)
        else:
            seqs.append(turn_start + source - covers)
    return seqs


_META = "platform_message_id, answered, sender_id, sender_name"


async def _with_metadata(db: aiosqlite.Connection, parent_id: str,
                         messages: Sequence[NewMessage], seqs: Sequence[int | None]
                         ) -> list[NewMessage]:
    """Copies keep what the store knows about their original beside the message itself."""
    wanted = [s for s in seqs if s is not None]
    if not wanted:
        return list(messages)
    found = await db.execute_fetchall(
        f"SELECT seq, {_META} FROM messages WHERE session_id = ? AND seq {IN_IDS}",
        (parent_id, json.dumps(wanted)))
    meta = {row[0]: row[1:] for row in found}
    out: list[NewMessage] = []
    for message, seq in zip(messages, seqs, strict=True):
        values = meta.get(seq) if seq is not None else None
        if values is not None and any(v is not None for v in values):
            pid, answered, sender_id, sender_name = values
            message = dataclasses.replace(
                message, platform_message_id=pid,
                answered=None if answered is None else bool(answered),
                sender_id=sender_id, sender_name=sender_name)
        out.append(message)
    return out


async def _repoint_inbound(db: aiosqlite.Connection, parent_id: str,
                           stored: Sequence[StoredMessage], seqs: Sequence[int | None]) -> None:
    """Inbound rows that pointed at an original point at its copy in the continuation."""
    pairs = [(m.id, seq) for m, seq in zip(stored, seqs, strict=True)
             if seq is not None and m.platform_message_id is not None]
    if pairs:
        await db.executemany(
            "UPDATE inbound SET message_row_id = ? WHERE message_row_id ="
            " (SELECT id FROM messages WHERE session_id = ? AND seq = ?)",
            [(row_id, parent_id, seq) for row_id, seq in pairs])


async def _carry_over(db: aiosqlite.Connection, parent_id: str, child_id: str,
                      compaction: Compaction, turn_messages: int) -> None:
    """Copy the parent's messages the compaction did not see to the end of the child."""
    covers = compaction.covers or 0
    row = await fetch_one(db, "SELECT COUNT(*) FROM messages WHERE session_id = ?", (parent_id,))
    unseen = row[0] - turn_messages - covers
    if unseen < 0:
        raise StoreError(f"compaction covers {covers} messages but session {parent_id} has "
                         f"{row[0] - turn_messages}")
    if unseen:
        await db.execute(
            f"INSERT INTO messages (session_id, seq, {_MESSAGE_FIELDS})"
            f" SELECT ?, ? + ROW_NUMBER() OVER (ORDER BY seq) - 1, {_MESSAGE_FIELDS} FROM"
            " (SELECT * FROM messages WHERE session_id = ? ORDER BY seq LIMIT ? OFFSET ?)",
            (child_id, len(compaction.messages), parent_id, unseen, covers))


_OPEN = "status IN ('pending', 'taken')"


async def mark_inbound(db: aiosqlite.Connection, answered: Sequence[int],
                       failed: Sequence[int]) -> None:
    """Finish open rows: answered (their message rows too, in live sessions) or failed.

    A finished row never changes again, so a late stop cannot turn a delivered reply into
    a failure, and an ended session's messages are never touched.
    """
    if answered:
        ids = json.dumps(list(answered))
        await db.execute("UPDATE messages SET answered = 1 WHERE id IN (SELECT message_row_id"
                         f" FROM inbound WHERE id {IN_IDS} AND {_OPEN}) AND session_id IN"
                         " (SELECT id FROM sessions WHERE end_reason IS NULL)", (ids,))
        await db.execute(f"UPDATE inbound SET status = 'answered' WHERE id {IN_IDS} AND {_OPEN}",
                         (ids,))
    if failed:
        await db.execute(f"UPDATE inbound SET status = 'failed' WHERE id {IN_IDS} AND {_OPEN}",
                         (json.dumps(list(failed)),))


async def set_reply(db: aiosqlite.Connection, inbound_ids: Sequence[int],
                    reply: StoredMessage | None) -> None:
    """Point taken rows at their stored, not yet delivered, reply."""
    if inbound_ids and reply is not None:
        await db.execute(f"UPDATE inbound SET reply_row_id = ? WHERE id {IN_IDS}"
                         " AND status = 'taken'", (reply.id, json.dumps(list(inbound_ids))))


async def take_inbound(db: aiosqlite.Connection, inbound_ids: Sequence[int],
                       stored: Sequence[StoredMessage]) -> None:
    """Mark pending rows taken, each linked to the message carrying its platform message id,
    else to the message at its position (as many messages as rows), else to the last one."""
    found = await db.execute_fetchall(
        f"SELECT id, message_id, status FROM inbound WHERE id {IN_IDS}",
        (json.dumps(list(inbound_ids)),))
    by_id = {row[0]: row for row in found}
    by_platform_id = {m.platform_message_id: m for m in stored if m.platform_message_id}
    links: list[tuple[int | None, int]] = []
    for position, inbound_id in enumerate(inbound_ids):
        row = by_id.get(inbound_id)
        if row is None or row[2] != "pending":
            state = "missing" if row is None else row[2]
            raise StoreError(f"inbound {inbound_id} cannot be taken: it is {state}")
        target = by_platform_id.get(row[1])
        if target is None and stored:
            target = stored[position] if len(stored) == len(inbound_ids) else stored[-1]
        links.append((target.id if target else None, inbound_id))
    if links:
        await db.executemany("UPDATE inbound SET status = 'taken', message_row_id = ?"
                             " WHERE id = ?", links)


async def insert_usage(db: aiosqlite.Connection, session_id: str,
                       usage: Sequence[UsageRecord], now: float) -> None:
    if not usage:
        return
    await db.executemany(
        "INSERT INTO usage (session_id, model, purpose, input, output, cache_read,"
        " cache_write, reasoning, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [(session_id, u.model, u.purpose, u.input_tokens, u.output_tokens,
          u.cache_read_tokens, u.cache_write_tokens, u.reasoning_tokens, now) for u in usage])


async def save_state(db: aiosqlite.Connection, session_id: str, state: dict[str, Any] | None,
                     last_prompt_tokens: int | None) -> SessionRecord:
    """Set whichever of the two is given (None keeps it); return the session as it is now.

    One statement either way: with nothing to set, the UPDATE rewrites the row unchanged and
    still reads it back. StoreError when there is no such session.
    """
    row = await fetch_one(
        db, "UPDATE sessions SET engine_state = COALESCE(?, engine_state),"
        " last_prompt_tokens = COALESCE(?, last_prompt_tokens) WHERE id = ?"
        f" RETURNING {_SESSION_COLUMNS_OF.format(s='sessions')}",
        (None if state is None else _dumps(state), last_prompt_tokens, session_id))
    if row is None:
        raise StoreError(f"no session {session_id!r}")
    return session_record(row)
