"""The one transaction a compaction is: end the parent, start its continuation.

The child gets the compacted messages; copies of the parent's messages keep what the
store knows about them (platform id, answered flag, sender) and take over the inbound
rows that pointed at the originals, so nothing ever needs to change in the ended parent.
Turns the compaction did not see (another process's) are carried over after them.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from storage.errors import ContinuationConflict, StoreError
from storage.models import Compaction, NewMessage, StoredMessage
from storage.rows import MESSAGE_FIELDS, dumps, source_seqs, with_metadata
from storage.sqlite import queries as q


def continue_session(db: sqlite3.Connection, parent_id: str, compaction: Compaction,
                           now: float, turn_messages: int = 0) -> str:
    """End live `parent_id` by compression and create its continuation; returns the child id.

    The child copies chat key, model, system prompt and title, and counts one more
    compression; the chat moves to it. `turn_messages` is how many of the parent's last
    messages this turn's `before` appended (see Compaction.covers).
    """
    child_id = q.new_session_id(now)
    db.execute("UPDATE sessions SET end_reason = 'compression', ended_at = ? WHERE id = ?",
                     (now, parent_id))
    try:
        db.execute(
            "INSERT INTO sessions (id, chat_key, parent_session_id, kind, started_at, model,"
            " system_prompt, title, compression_count, engine_state)"
            " SELECT ?, chat_key, id, 'compression', ?, model, system_prompt, title,"
            " compression_count + 1, ? FROM sessions WHERE id = ?",
            (child_id, now, dumps(compaction.engine_state), parent_id))
    except sqlite3.IntegrityError as exc:
        if "parent_session_id" in str(exc):  # sessions_one_continuation: a racing writer won
            raise ContinuationConflict(f"session {parent_id} was already continued") from exc
        raise
    parent_seqs = _source_seqs(db, parent_id, compaction, turn_messages)
    copied = _with_metadata(db, parent_id, compaction.messages, parent_seqs)
    stored = q.append(db, child_id, copied, now)
    _repoint_inbound(db, parent_id, stored, parent_seqs)
    if compaction.covers is not None:
        _carry_over(db, parent_id, child_id, compaction, turn_messages)
    db.execute("UPDATE chats SET session_id = ?, updated_at = ? WHERE session_id = ?"
                     " AND chat_key = (SELECT chat_key FROM sessions WHERE id = ?)",
                     (child_id, now, parent_id, parent_id))
    return child_id


def _source_seqs(db: sqlite3.Connection, parent_id: str, compaction: Compaction,
                 turn_messages: int) -> list[int | None]:
    if not any(s is not None for s in compaction.sources):
        return [None] * len(compaction.messages)
    turn_start = 0
    if compaction.covers is not None:  # this turn's `before` starts after all else stored
        row = q.fetch_one(db, "SELECT COUNT(*) FROM messages WHERE session_id = ?",
                          (parent_id,))
        turn_start = row[0] - turn_messages
    return source_seqs(compaction, turn_start)


_META = "platform_message_id, answered, sender_id, sender_name"


def _with_metadata(db: sqlite3.Connection, parent_id: str,
                         messages: Sequence[NewMessage], seqs: Sequence[int | None]
                         ) -> list[NewMessage]:
    """Copies keep what the store knows about their original beside the message itself."""
    wanted = [s for s in seqs if s is not None]
    if not wanted:
        return list(messages)
    found = db.execute(
        f"SELECT seq, {_META} FROM messages WHERE session_id = ? AND seq {q.IN_IDS}",
        (parent_id, json.dumps(wanted))).fetchall()
    return with_metadata(messages, seqs, {row[0]: row[1:] for row in found})


def _repoint_inbound(db: sqlite3.Connection, parent_id: str,
                           stored: Sequence[StoredMessage], seqs: Sequence[int | None]) -> None:
    """Inbound rows that pointed at an original point at its copy in the continuation."""
    pairs = [(m.id, seq) for m, seq in zip(stored, seqs, strict=True)
             if seq is not None and m.platform_message_id is not None]
    if pairs:
        db.executemany(
            "UPDATE inbound SET message_row_id = ? WHERE message_row_id ="
            " (SELECT id FROM messages WHERE session_id = ? AND seq = ?)",
            [(row_id, parent_id, seq) for row_id, seq in pairs])


def _carry_over(db: sqlite3.Connection, parent_id: str, child_id: str,
                      compaction: Compaction, turn_messages: int) -> None:
    """Copy the parent's messages the compaction did not see to the end of the child."""
    covers = compaction.covers or 0
    row = q.fetch_one(db, "SELECT COUNT(*) FROM messages WHERE session_id = ?", (parent_id,))
    unseen = row[0] - turn_messages - covers
    if unseen < 0:
        raise StoreError(f"compaction covers {covers} messages but session {parent_id} has "
                         f"{row[0] - turn_messages}")
    if unseen:
        db.execute(
            f"INSERT INTO messages (session_id, seq, {MESSAGE_FIELDS})"
            f" SELECT ?, ? + ROW_NUMBER() OVER (ORDER BY seq) - 1, {MESSAGE_FIELDS} FROM"
            " (SELECT * FROM messages WHERE session_id = ? ORDER BY seq LIMIT ? OFFSET ?)",
            (child_id, len(compaction.messages), parent_id, unseen, covers))
