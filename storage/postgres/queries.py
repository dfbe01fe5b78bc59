"""Every SQL statement of the PostgreSQL store, and the steps that run them inside the
store's transaction on one pooled connection. The SQLite store's `queries.py` is the
model: the same steps with the same meaning (docs/storage.md, "PostgreSQL")."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import asyncpg

from storage.errors import ContinuationConflict, StoreError
from storage.models import NewMessage, OutChunk, SessionRecord, StoredMessage, UsageRecord
from storage.postgres import spending
from storage.postgres.notices import notice_sql
from storage.rows import (
    INBOUND_COLUMNS,
    MAX_CHAIN_DEPTH,
    MESSAGE_COLUMNS,
    SESSION_COLUMNS,
    dumps,
    message_values,
    session_record,
)

Con = asyncpg.Connection

# --- compression walks: one recursive query each, every step an index lookup -------------
# A step follows a kind='compression' child of a session that ended by compression; the
# depth bound makes even a corrupt cycle end.
_DOWN = """down(id, depth) AS (
    SELECT id, 0 FROM start
    UNION ALL
    SELECT c.id, down.depth + 1 FROM down
    JOIN sessions AS p ON p.id = down.id AND p.end_reason = 'compression'
    JOIN sessions AS c ON c.parent_session_id = down.id AND c.kind = 'compression'
    WHERE down.depth < $2)"""
_UP = """up(id, depth) AS (
    SELECT $1::text, 0
    UNION ALL
    SELECT s.parent_session_id, up.depth + 1 FROM up
    JOIN sessions AS s ON s.id = up.id AND s.kind = 'compression'
    JOIN sessions AS p ON p.id = s.parent_session_id AND p.end_reason = 'compression'
    WHERE up.depth < $2)"""
TIP = (f"WITH RECURSIVE start(id) AS (SELECT $1::text), {_DOWN}"
       " SELECT id, depth FROM down ORDER BY depth DESC LIMIT 1")
_CHAIN = (f"WITH RECURSIVE {_UP}, start(id) AS (SELECT id FROM up ORDER BY depth DESC LIMIT 1),"
          f" {_DOWN}, chain(id, depth) AS (SELECT id, MIN(depth) FROM down GROUP BY id) ")
CHAIN_SESSIONS = (f"{_CHAIN} SELECT {SESSION_COLUMNS} FROM chain"
                  " JOIN sessions AS s ON s.id = chain.id ORDER BY chain.depth")
LIVE_SESSION = (
    "WITH RECURSIVE start(id) AS (SELECT session_id FROM chats WHERE chat_key = $1), "
    f"{_DOWN}, tip(id) AS (SELECT id FROM down ORDER BY depth DESC LIMIT 1) "
    f"SELECT {SESSION_COLUMNS} FROM tip JOIN sessions AS s ON s.id = tip.id")

_USAGE_SUMS = ("COALESCE(SUM(input), 0), COALESCE(SUM(output), 0),"
               " COALESCE(SUM(cache_read), 0), COALESCE(SUM(cache_write), 0),"
               " COALESCE(SUM(reasoning), 0), COUNT(*)")
_CHAIN_USAGE = "FROM usage WHERE session_id IN (SELECT id FROM chain)"
USAGE_TOTALS = f"{_CHAIN} SELECT {_USAGE_SUMS} {_CHAIN_USAGE}"
USAGE_BY_MODEL = f"{_CHAIN} SELECT model, {_USAGE_SUMS} {_CHAIN_USAGE} GROUP BY model"
USAGE_BY_SESSION = (f"SELECT session_id, {_USAGE_SUMS} FROM usage"
                    " WHERE session_id = ANY($1::text[]) GROUP BY session_id")

SESSION_BY_ID = f"SELECT {SESSION_COLUMNS} FROM sessions AS s WHERE s.id = $1"
SESSION_BY_CHAT = (f"SELECT {SESSION_COLUMNS} FROM sessions AS s"
                   " WHERE $1::text IS NULL OR s.chat_key = $1"
                   " ORDER BY s.started_at DESC, s.id DESC LIMIT $2")
END_SESSION = ("UPDATE sessions SET end_reason = $1, ended_at = $2"
               " WHERE id = $3 AND end_reason IS NULL")
HISTORY = f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_id = $1 ORDER BY seq"
MESSAGE_BY_ID = f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE id = $1"
SESSION_PAGE = (f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_id = $1 AND seq >= $2"
                " ORDER BY seq LIMIT $3")
# Every term must occur (like the SQLite store's quoted FTS5 terms); best matches first.
SEARCH = (
    "SELECT m.session_id, s.chat_key, m.seq, m.role,"
    " ts_headline('simple', m.search_text, query, 'StartSel=[, StopSel=], MaxWords=16,"
    " MinWords=12, ShortWord=1'), m.created_at"
    " FROM messages AS m JOIN sessions AS s ON s.id = m.session_id,"
    " to_tsquery('simple', $1) AS query"
    " WHERE m.search_vector @@ query AND ($2::text IS NULL OR s.chat_key = $2)"
    " ORDER BY ts_rank(m.search_vector, query) DESC, m.id LIMIT $3")
# The row, the chat's rows open before it, and the live holder of the chat's lease when that
# is another process ($10 is this one): then the notice to it goes in the same statement,
# carrying the row, so the message is on its way to its holder without a claim of ours and
# the holder need not read it (docs/scale-out.md, "Who answers a chat").
_NOTICE_ROW = ("json_build_array(a.id, $1::text, $2::text, $3::text, $4::text, $5::text,"
               " $6::text, $7::text, $8::float8, 'pending', NULL, $9::text, NULL, 0, o.ids)::text")
INGEST = ("WITH added AS (INSERT INTO inbound (platform, chat_id, message_id, chat_key, text,"
          " sender_id, sender_name, received_at, extra)"
          " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT DO NOTHING RETURNING id),"
          " open AS (SELECT ARRAY(SELECT o.id FROM inbound AS o"
          " WHERE o.chat_key = $4 AND o.status IN ('pending', 'taken')) AS ids),"
          " held AS (SELECT holder FROM leases WHERE name = 'chat:' || $4 AND holder <> $10"
          " AND expires_at >= extract(epoch from clock_timestamp()))"
          " SELECT a.id, o.ids, h.holder, CASE WHEN h.holder IS NULL THEN NULL"
          f" ELSE pg_notify('threadline_chats', {notice_sql('h.holder', '$4', _NOTICE_ROW)})"
          " END FROM added AS a CROSS JOIN open AS o LEFT JOIN held AS h ON TRUE")
_OPEN = "status IN ('pending', 'taken')"
_ONE_INBOUND = "WHERE platform = $1 AND chat_id = $2 AND message_id = $3"
FIND_INBOUND = f"SELECT {INBOUND_COLUMNS} FROM inbound {_ONE_INBOUND}"
INBOUND_BY_IDS = (f"SELECT {INBOUND_COLUMNS} FROM inbound WHERE id = ANY($1::bigint[])"
                  " ORDER BY received_at, id")
LATEST_INBOUND = (f"SELECT {INBOUND_COLUMNS} FROM inbound WHERE id IN"
                  " (SELECT MAX(id) FROM inbound WHERE platform = $1 GROUP BY chat_key)")
OPEN_INBOUND = (f"SELECT {INBOUND_COLUMNS} FROM inbound WHERE {_OPEN}"
                " AND ($1::text IS NULL OR chat_key = $1) ORDER BY received_at, id")
# A write for a chat made under a fence ($E, storage/coordination.py): only while the chat's
# lease is at that generation. (The rows' own chat key names the lease.)
_FENCED = ("($E::bigint IS NULL OR EXISTS (SELECT 1 FROM leases AS l"
           " WHERE l.name = 'chat:' || inbound.chat_key AND l.epoch = $E))")
FINISH_INBOUND = ("UPDATE inbound SET status = $1 WHERE id = ANY($2::bigint[])"
                  f" AND {_OPEN} AND {_FENCED.replace('$E', '$3')}")
RETRY_INBOUND = ("UPDATE inbound SET attempts = attempts + 1 WHERE id = ANY($1::bigint[])"
                 f" AND {_OPEN} AND {_FENCED.replace('$E', '$2')}")
# Whether any of the rows' chats has its lease at generation $2.
FENCE_OF_ROWS = ("SELECT EXISTS (SELECT 1 FROM inbound WHERE id = ANY($1::bigint[])"
                 f" AND {_FENCED.replace('$E', '$2')})")
UNDO_ATTEMPT = ("UPDATE inbound SET attempts = attempts - 1 WHERE id = ANY($1::bigint[])"
                " AND status = 'taken' AND attempts > 0")
DELIVERIES_OF = ("SELECT inbound_id, chunk, text, entities, status, platform_message_id"
                 " FROM deliveries WHERE inbound_id = $1 ORDER BY chunk")
ANY_DELIVERY = "SELECT 1 FROM deliveries WHERE inbound_id = $1 LIMIT 1"
MARK_DELIVERED = ("UPDATE deliveries SET status = $1, platform_message_id = $2, sent_at = $3,"
                  " sending = 0"
                  " WHERE inbound_id = $4 AND chunk = $5 AND status = 'pending'")
UNDELIVERED = ("SELECT DISTINCT reply_row_id FROM deliveries"
               " WHERE reply_row_id = ANY($1::bigint[]) AND status = 'pending'")
SENDING = ("UPDATE deliveries SET maybe_sent = GREATEST(maybe_sent, sending), sending = 1"
           " WHERE inbound_id = $1 AND chunk = $2 AND status = 'pending' AND EXISTS ("
           f" SELECT 1 FROM inbound WHERE inbound.id = $1 AND {_FENCED.replace('$E', '$3')})"
           " RETURNING 1")
NOT_SENT = "UPDATE deliveries SET sending = 0 WHERE inbound_id = $1 AND chunk = $2"
CHAT_MOVES = "SELECT platform, old_chat_id, new_chat_id FROM chat_moves"
ADD_PREVIEW = ("INSERT INTO previews (inbound_id, position, platform_message_id)"
               " VALUES ($1, $2, $3) ON CONFLICT (inbound_id, position)"
               " DO UPDATE SET platform_message_id = EXCLUDED.platform_message_id")
PREVIEWS_OF = ("SELECT inbound_id, platform_message_id FROM previews"
               " WHERE inbound_id = ANY($1::bigint[]) ORDER BY inbound_id, position")
FORGET_PREVIEWS = "DELETE FROM previews WHERE inbound_id = ANY($1::bigint[])"


async def move_chat(con: Con, platform: str, old_chat_id: str, new_chat_id: str,
                    now: float) -> None:
    """As `storage/sqlite/queries.py`'s `move_chat`."""
    old, new = f"{platform}:{old_chat_id}", f"{platform}:{new_chat_id}"
    await con.execute("INSERT INTO chat_moves (platform, old_chat_id, new_chat_id, moved_at)"
                      " VALUES ($1, $2, $3, $4) ON CONFLICT (platform, old_chat_id)"
                      " DO UPDATE SET new_chat_id = EXCLUDED.new_chat_id,"
                      " moved_at = EXCLUDED.moved_at", platform, old_chat_id, new_chat_id, now)
    if await con.fetchval("SELECT 1 FROM chats WHERE chat_key = $1", new) is None:
        await con.execute("UPDATE sessions SET chat_key = $1 WHERE chat_key = $2", new, old)
        await con.execute("UPDATE chats SET chat_key = $1 WHERE chat_key = $2", new, old)
    await con.execute("UPDATE inbound SET chat_key = $1 WHERE chat_key = $2", new, old)


GET_SETTING = "SELECT value FROM settings WHERE key = $1"
PUT_SETTING = ("INSERT INTO settings (key, value, updated_at) VALUES ($1, $2, $3)"
               " ON CONFLICT (key) DO UPDATE SET value = excluded.value,"
               " updated_at = excluded.updated_at")
CHAT_ACTIVITY = """
    SELECT c.chat_key, s.id, GREATEST(s.started_at, COALESCE(
        (SELECT MAX(i.received_at) FROM inbound AS i WHERE i.chat_key = c.chat_key), 0))
    FROM chats AS c JOIN sessions AS s ON s.id = c.session_id
    WHERE s.end_reason IS NULL AND ($1::text IS NULL OR c.chat_key = $1)
    ORDER BY c.chat_key"""


def chain_params(session_id: str) -> tuple[str, int]:
    return session_id, MAX_CHAIN_DEPTH


# --- steps inside a transaction -------------------------------------------------------------
async def load_session(con: Con, session_id: str) -> SessionRecord | None:
    row = await con.fetchrow(SESSION_BY_ID, session_id)
    return session_record(row) if row else None


async def require_session(con: Con, session_id: str) -> SessionRecord:
    record = await load_session(con, session_id)
    if record is None:
        raise StoreError(f"no session {session_id!r}")
    return record


async def live_session(con: Con, chat_key: str) -> SessionRecord | None:
    row = await con.fetchrow(LIVE_SESSION, chat_key, MAX_CHAIN_DEPTH)
    record = session_record(row) if row else None
    return record if record is not None and record.live else None


async def end_reason_of(con: Con, session_id: str, *, lock: bool = False) -> str | None:
    """None while live; StoreError when there is no such session. `lock` holds its row."""
    row = await con.fetchrow("SELECT end_reason FROM sessions WHERE id = $1"
                             + (" FOR UPDATE" if lock else ""), session_id)
    if row is None:
        raise StoreError(f"no session {session_id!r}")
    return row[0]


async def require_open(con: Con, session_id: str, *, continuing: bool = False,
                       live: bool = False) -> None:
    """As the SQLite store's: may this session take new messages? Also locks its row, so
    appends to one session queue behind each other (each reads the last seq)."""
    end_reason = await end_reason_of(con, session_id, lock=True)
    continued = await con.fetchval(
        "SELECT EXISTS (SELECT 1 FROM sessions WHERE parent_session_id = $1"
        " AND kind = 'compression')", session_id)
    if end_reason == "compression" or ((continuing or live) and end_reason is not None) \
            or (continuing and continued):
        raise ContinuationConflict(
            f"session {session_id} was already continued or has ended ({end_reason})")


def ts_query(text: str) -> str | None:
    """User text as a tsquery: each whitespace-separated term must occur, and a term that
    holds several words (`PELICAN-7731`, `a.b`) as those words in a row, the way FTS5
    reads a quoted term. Words are runs of letters and digits, as the index cuts them."""
    terms = []
    for term in text.split():
        words = "".join(ch if ch.isalnum() else " " for ch in term).split()
        if words:
            terms.append("(" + " <-> ".join(f"'{w}'" for w in words) + ")")
    return " & ".join(terms) or None


def search_text(message: dict[str, Any]) -> str | None:
    """What search indexes of a message: its text, or its text and attachment parts."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    texts = [str(part.get("text")) for part in content if isinstance(part, dict)
             and part.get("type") in ("text", "attachment") and part.get("text") is not None]
    return "\n".join(texts) if texts else None


_INSERT = """INSERT INTO messages (session_id, seq, role, content, content_format, tool_calls,
    tool_call_id, tool_name, extra, tokens, created_at, platform_message_id, answered,
    sender_id, sender_name, search_text)
    SELECT $1, * FROM unnest($2::int[], $3::text[], $4::text[], $5::int[], $6::text[],
        $7::text[], $8::text[], $9::text[], $10::int[], $11::float8[], $12::text[],
        $13::int[], $14::text[], $15::text[], $16::text[])
    RETURNING id, seq"""


async def append(con: Con, session_id: str, messages: Sequence[NewMessage],
                 now: float) -> list[StoredMessage]:
    if not messages:
        return []
    start = await con.fetchval(
        "SELECT COALESCE(MAX(seq) + 1, 0) FROM messages WHERE session_id = $1", session_id)
    columns: list[list[Any]] = [[] for _ in range(15)]
    for pos, new in enumerate(messages):
        values = (start + pos, *message_values(new, now), search_text(new.message))
        for column, value in zip(columns, values, strict=True):
            column.append(value)
    return stored_rows(session_id, messages, await con.fetch(_INSERT, session_id, *columns),
                       now)


def stored_rows(session_id: str, messages: Sequence[NewMessage], found: Sequence[Any],
                now: float) -> list[StoredMessage]:
    """The messages as stored, from the (id, seq) rows their insert returned."""
    rows = sorted(found, key=lambda row: row[1])
    return [StoredMessage(id=row_id, session_id=session_id, seq=seq, message=dict(m.message),
                          tokens=m.tokens, created_at=now,
                          platform_message_id=m.platform_message_id, answered=m.answered,
                          sender_id=m.sender_id, sender_name=m.sender_name)
            for m, (row_id, seq) in zip(messages, rows, strict=True)]


async def mark_inbound(con: Con, failed: Sequence[int]) -> None:
    if failed:
        await con.execute(FINISH_INBOUND, "failed", list(failed))


async def set_reply(con: Con, inbound_ids: Sequence[int], reply: StoredMessage | None) -> None:
    if inbound_ids and reply is not None:
        await con.execute("UPDATE inbound SET reply_row_id = $1 WHERE id = ANY($2::bigint[])"
                          " AND status = 'taken'", reply.id, list(inbound_ids))


async def insert_usage(con: Con, session_id: str, usage: Sequence[UsageRecord],
                       now: float) -> None:
    """Store usage rows, and add them to their spend counters in the same transaction."""
    if usage:
        await con.executemany(
            "INSERT INTO usage (session_id, model, purpose, input, output, cache_read,"
            " cache_write, reasoning, at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            [(session_id, u.model, u.purpose, u.input_tokens, u.output_tokens,
              u.cache_read_tokens, u.cache_write_tokens, u.reasoning_tokens, now)
             for u in usage])
        await spending.add(con, usage)


async def save_state(con: Con, session_id: str, state: dict[str, Any] | None,
                     last_prompt_tokens: int | None) -> SessionRecord:
    await con.execute("UPDATE sessions SET engine_state = COALESCE($1, engine_state),"
                      " last_prompt_tokens = COALESCE($2, last_prompt_tokens) WHERE id = $3",
                      None if state is None else dumps(state), last_prompt_tokens, session_id)
    return await require_session(con, session_id)


async def update_pending_text(con: Con, key: tuple[str, str, str], text: str) -> str | None:
    status = await con.fetchval(f"SELECT status FROM inbound {_ONE_INBOUND} FOR UPDATE", *key)
    if status == "pending":
        await con.execute(f"UPDATE inbound SET text = $4 {_ONE_INBOUND}", *key, text)
    return status


async def insert_delivery(con: Con, inbound_id: int, reply_row_id: int | None,
                          chunks: Sequence[OutChunk]) -> None:
    if chunks:
        await con.executemany(
            "INSERT INTO deliveries (inbound_id, chunk, reply_row_id, text, entities,"
            " platform_message_id, sending) VALUES ($1, $2, $3, $4, $5, $6, $7)"
            " ON CONFLICT DO NOTHING",  # `sending` as in the SQLite store's insert_delivery
            [(inbound_id, i, reply_row_id, c.text, dumps(list(c.entities)), c.edit_of,
              int(i == 0 and c.edit_of is None)) for i, c in enumerate(chunks)])
