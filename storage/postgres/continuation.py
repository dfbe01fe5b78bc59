"""The one transaction a compaction is, on PostgreSQL: end the parent, start its continuation
(and the rest of the turn that made it, `record_turn`).

The same steps as `storage/sqlite/continuation.py` (which explains them): copies keep their
original's metadata, inbound rows follow them, turns the compaction did not see are
carried over, and the chat moves to the child.
"""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg

from storage.errors import ContinuationConflict, StoreError
from storage.models import Compaction, NewMessage, SessionRecord, StoredMessage, TurnRecord
from storage.postgres import queries as q
from storage.postgres import spending, turns
from storage.rows import MESSAGE_FIELDS, dumps, new_session_id, source_seqs, with_metadata


async def record_turn(con: q.Con, session_id: str, epoch: int | None, turn: TurnRecord,
                      now: float) -> SessionRecord:
    """The store's record_turn for a turn with a compaction: several statements, inside the
    caller's transaction (the rest of the turn as `turns.record` does it in one)."""
    compaction = turn.compaction
    assert compaction is not None
    await turns.require_lease(con, session_id, epoch)
    await q.require_open(con, session_id, continuing=True)
    before = await q.append(con, session_id, turn.before, now)
    live_id = await continue_session(con, session_id, compaction, now, len(before))
    after = await q.append(con, live_id, turn.after, now)
    reply = (after or before or [None])[-1]
    await q.set_reply(con, turn.replied, reply)
    if turn.replied and reply is not None:
        await q.insert_delivery(con, turn.replied[-1], reply.id, turn.delivery)
    await q.mark_inbound(con, turn.failed)
    await q.insert_usage(con, session_id, turn.usage, now)  # and its spend counters
    await spending.release(con, turn.release_hold)
    return await q.save_state(con, live_id, turn.engine_state, turn.last_prompt_tokens)


async def continue_session(con: q.Con, parent_id: str, compaction: Compaction, now: float,
                           turn_messages: int = 0) -> str:
    """End live `parent_id` by compression and create its continuation; returns the child id."""
    child_id = new_session_id(now)
    await con.execute("UPDATE sessions SET end_reason = 'compression', ended_at = $1"
                      " WHERE id = $2", now, parent_id)
    try:
        await con.execute(
            "INSERT INTO sessions (id, chat_key, parent_session_id, kind, started_at, model,"
            " system_prompt, title, compression_count, engine_state)"
            " SELECT $1, chat_key, id, 'compression', $2, model, system_prompt, title,"
            " compression_count + 1, $3 FROM sessions WHERE id = $4",
            child_id, now, dumps(compaction.engine_state), parent_id)
    except asyncpg.UniqueViolationError as exc:
        if exc.constraint_name != "sessions_one_continuation":
            raise
        raise ContinuationConflict(f"session {parent_id} was already continued") from exc
    parent_seqs = await _source_seqs(con, parent_id, compaction, turn_messages)
    copied = await _with_metadata(con, parent_id, compaction.messages, parent_seqs)
    stored = await q.append(con, child_id, copied, now)
    await _repoint_inbound(con, parent_id, stored, parent_seqs)
    if compaction.covers is not None:
        await _carry_over(con, parent_id, child_id, compaction, turn_messages)
    await con.execute("UPDATE chats SET session_id = $1, updated_at = $2 WHERE session_id = $3"
                      " AND chat_key = (SELECT chat_key FROM sessions WHERE id = $3)",
                      child_id, now, parent_id)
    return child_id


async def _count(con: q.Con, session_id: str) -> int:
    return int(await con.fetchval("SELECT COUNT(*) FROM messages WHERE session_id = $1",
                                  session_id))


async def _source_seqs(con: q.Con, parent_id: str, compaction: Compaction,
                       turn_messages: int) -> list[int | None]:
    if not any(s is not None for s in compaction.sources):
        return [None] * len(compaction.messages)
    turn_start = 0
    if compaction.covers is not None:  # this turn's `before` starts after all else stored
        turn_start = await _count(con, parent_id) - turn_messages
    return source_seqs(compaction, turn_start)


async def _with_metadata(con: q.Con, parent_id: str, messages: Sequence[NewMessage],
                         seqs: Sequence[int | None]) -> list[NewMessage]:
    wanted = [s for s in seqs if s is not None]
    if not wanted:
        return list(messages)
    found = await con.fetch(
        "SELECT seq, platform_message_id, answered, sender_id, sender_name FROM messages"
        " WHERE session_id = $1 AND seq = ANY($2::int[])", parent_id, wanted)
    return with_metadata(messages, seqs, {row[0]: tuple(row[1:]) for row in found})


async def _repoint_inbound(con: q.Con, parent_id: str, stored: Sequence[StoredMessage],
                           seqs: Sequence[int | None]) -> None:
    pairs = [(m.id, parent_id, seq) for m, seq in zip(stored, seqs, strict=True)
             if seq is not None and m.platform_message_id is not None]
    if pairs:
        await con.executemany(
            "UPDATE inbound SET message_row_id = $1 WHERE message_row_id ="
            " (SELECT id FROM messages WHERE session_id = $2 AND seq = $3)", pairs)


async def _carry_over(con: q.Con, parent_id: str, child_id: str, compaction: Compaction,
                      turn_messages: int) -> None:
    covers = compaction.covers or 0
    total = await _count(con, parent_id)
    unseen = total - turn_messages - covers
    if unseen < 0:
        raise StoreError(f"compaction covers {covers} messages but session {parent_id} has "
                         f"{total - turn_messages}")
    if unseen:
        fields = f"{MESSAGE_FIELDS}, search_text"
        await con.execute(
            f"INSERT INTO messages (session_id, seq, {fields})"
            f" SELECT $1, $2 + ROW_NUMBER() OVER (ORDER BY seq) - 1, {fields} FROM"
            " (SELECT * FROM messages WHERE session_id = $3 ORDER BY seq LIMIT $4 OFFSET $5)"
            " AS unseen", child_id, len(compaction.messages), parent_id, unseen, covers)
