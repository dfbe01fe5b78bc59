"""Row codecs shared by both backends: what a row of each table looks like, and how it
becomes a value and back.

The column lists live here beside the codecs that depend on their order; the statements
that use them are in each backend's `queries.py`.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import time
from collections.abc import Sequence
from typing import Any

from storage.errors import InboundChanged, StoreError
from storage.models import (
    ChatSummary,
    Compaction,
    Delivery,
    InboundRecord,
    NewMessage,
    SearchHit,
    SessionRecord,
    StoredMessage,
    UsageTotals,
)

_TEXT, _JSON, _NONE, _ABSENT = range(4)  # messages.content_format
MAX_CHAIN_DEPTH = 10_000  # compression steps a chain walk follows at most


def new_session_id(now: float) -> str:
    """Sortable by creation time, unique by its random tail: 20250101T120000123-9f1c2e3d4b5a."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now))
    return f"{stamp}{int(now * 1000) % 1000:03d}-{secrets.token_hex(6)}"


# A template over the table's name `s`: a RETURNING clause cannot use a table alias.
# Seqs run 0, 1, 2 ... without gaps (nothing is deleted), so the count is the last seq + 1:
# one index seek, where COUNT(*) read every message of the session on every turn.
SESSION_COLUMNS_OF = """{s}.id, {s}.chat_key, {s}.parent_session_id, {s}.kind, {s}.end_reason,
    {s}.started_at, {s}.ended_at, {s}.model, {s}.system_prompt, {s}.title, {s}.compression_count,
    {s}.engine_state, {s}.last_prompt_tokens,
    (SELECT COALESCE(MAX(m.seq) + 1, 0) FROM messages AS m WHERE m.session_id = {s}.id),
    (SELECT COALESCE(SUM(u.input), 0) FROM usage AS u WHERE u.session_id = {s}.id),
    (SELECT COALESCE(SUM(u.output), 0) FROM usage AS u WHERE u.session_id = {s}.id)"""
SESSION_COLUMNS = SESSION_COLUMNS_OF.format(s="s")
INBOUND_COLUMNS = """id, platform, chat_id, message_id, chat_key, text, sender_id, sender_name,
    received_at, status, message_row_id, extra, reply_row_id, attempts"""
# Everything of a messages row but its id, session and position.
MESSAGE_FIELDS = """role, content, content_format, tool_calls, tool_call_id, tool_name, extra, tokens,
    created_at, platform_message_id, answered, sender_id, sender_name"""
MESSAGE_COLUMNS = f"id, session_id, seq, {MESSAGE_FIELDS}"
FIELD_COUNT = MESSAGE_FIELDS.count(",") + 1


def session_record(row: Sequence[Any]) -> SessionRecord:
    values = list(row)
    values[11] = json.loads(values[11]) if values[11] else {}
    return SessionRecord(*values)


def message_values(new: NewMessage, now: float) -> tuple[Any, ...]:
    """A messages row's `MESSAGE_FIELDS`, split so that `decode_message` rebuilds the dict."""
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
        content, content_format = dumps(value), _JSON
    tool_calls = dumps(rest.pop("tool_calls")) if "tool_calls" in rest else None
    tool_call_id = rest.pop("tool_call_id") if isinstance(rest.get("tool_call_id"), str) else None
    name = rest.pop("name") if isinstance(rest.get("name"), str) else None
    answered = None if new.answered is None else int(new.answered)
    return (role, content, content_format, tool_calls, tool_call_id, name,
            dumps(rest) if rest else None, new.tokens, now, new.platform_message_id,
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
            record.sender_id, record.sender_name, record.received_at, dumps(record.extra))


def inbound_record(row: Sequence[Any]) -> InboundRecord:
    values = list(row)
    values[11] = json.loads(values[11]) if values[11] else {}
    return InboundRecord(*values)


def search_hit(row: Sequence[Any]) -> SearchHit:
    return SearchHit(*row)


def dumps(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise StoreError(f"cannot store a value that is not JSON: {exc}") from exc


def usage_totals(row: Sequence[Any]) -> UsageTotals:
    """(input, output, cache read, cache write, reasoning, calls) as totals."""
    inp, out, read, write, reasoning, calls = row
    return UsageTotals(input_tokens=inp, output_tokens=out, cache_read_tokens=read,
                       cache_write_tokens=write, reasoning_tokens=reasoning, calls=calls)


def delivery(row: Sequence[Any]) -> Delivery:
    inbound_id, chunk, text, entities, status, platform_message_id = row
    return Delivery(inbound_id, chunk, text, tuple(json.loads(entities or "[]")), status,
                    platform_message_id)


def inbound_links(inbound_ids: Sequence[int], found: Sequence[Sequence[Any]],
                  stored: Sequence[StoredMessage],
                  texts: Sequence[str] | None = None) -> list[tuple[int | None, int]]:
    """(message row id, inbound id) for taking pending rows: each links to the message
    carrying its platform message id, else to the message at its position (as many
    messages as rows), else to the last one. `found` rows are (id, message_id, status,
    text); StoreError when one is missing or not pending, InboundChanged instead when the
    caller said which `texts` it read (and when one of those changed)."""
    by_id = {row[0]: row for row in found}
    by_platform_id = {m.platform_message_id: m for m in stored if m.platform_message_id}
    links: list[tuple[int | None, int]] = []
    for position, inbound_id in enumerate(inbound_ids):
        row = by_id.get(inbound_id)
        if texts is not None and (row is None or row[2] != "pending"
                                  or row[3] != texts[position]):
            raise InboundChanged(f"inbound {inbound_id} changed since it was read")
        if row is None or row[2] != "pending":
            state = "missing" if row is None else row[2]
            raise StoreError(f"inbound {inbound_id} cannot be taken: it is {state}")
        target = by_platform_id.get(row[1])
        if target is None and stored:
            target = stored[position] if len(stored) == len(inbound_ids) else stored[-1]
        links.append((target.id if target else None, inbound_id))
    return links


def source_seqs(compaction: Compaction, turn_start: int) -> list[int | None]:
    """The parent seq each compaction message copies (None: a new message).

    A source below `compaction.covers` is a stored seq; one at or past it counts into this
    turn's `before`, which starts at `turn_start` in the parent."""
    covers = compaction.covers
    return [source if source is None or covers is None or source < covers
            else turn_start + source - covers for source in compaction.sources]


def with_metadata(messages: Sequence[NewMessage], seqs: Sequence[int | None],
                  meta: dict[int, Sequence[Any]]) -> list[NewMessage]:
    """Copies keep what the store knew of their original: `meta` maps an original's seq to
    its (platform message id, answered, sender id, sender name)."""
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


# --- the operators' view (both backends run the same SQL; placeholders only in pages) ----
CHAT_SUMMARIES = """
    SELECT s.chat_key, c.session_id, COUNT(*),
        SUM(CASE WHEN s.kind = 'compression' THEN 1 ELSE 0 END), MAX(s.started_at),
        COALESCE((SELECT MAX(i.received_at) FROM inbound AS i
                  WHERE i.chat_key = s.chat_key), 0),
        COALESCE(SUM(n.count), 0)
    FROM sessions AS s
    LEFT JOIN chats AS c ON c.chat_key = s.chat_key
    LEFT JOIN (SELECT session_id, MAX(seq) + 1 AS count FROM messages GROUP BY session_id)
        AS n ON n.session_id = s.id
    GROUP BY s.chat_key, c.session_id"""
USAGE_BY_CHAT = """
    SELECT s.chat_key, u.model, COALESCE(SUM(u.input), 0), COALESCE(SUM(u.output), 0),
        COALESCE(SUM(u.cache_read), 0), COALESCE(SUM(u.cache_write), 0),
        COALESCE(SUM(u.reasoning), 0), COUNT(*)
    FROM usage AS u JOIN sessions AS s ON s.id = u.session_id
    GROUP BY s.chat_key, u.model"""


# A template over the placeholder style: `?` (SQLite) or `$1` (PostgreSQL).
SESSION_TOKENS = """
    SELECT s.id, COALESCE(SUM(m.tokens), 0),
        COALESCE(SUM(CASE WHEN m.created_at = s.started_at THEN m.tokens ELSE 0 END), 0)
    FROM sessions AS s LEFT JOIN messages AS m ON m.session_id = s.id
    WHERE s.chat_key = {key} GROUP BY s.id"""


# Usage by day and model; `{day}` is the backend's expression for the UTC date of `at`.
USAGE_BY_DAY = """
    SELECT {day} AS day, model, COALESCE(SUM(input), 0), COALESCE(SUM(output), 0),
        COALESCE(SUM(cache_read), 0), COALESCE(SUM(cache_write), 0),
        COALESCE(SUM(reasoning), 0), COUNT(*)
    FROM usage GROUP BY day, model ORDER BY day, model"""


def usage_by_day(found: Sequence[Sequence[Any]]) -> dict[str, dict[str, UsageTotals]]:
    days: dict[str, dict[str, UsageTotals]] = {}
    for row in found:
        days.setdefault(str(row[0]), {})[row[1]] = usage_totals(tuple(row[2:]))
    return days


def chat_summaries(chats: Sequence[Sequence[Any]],
                   usage: Sequence[Sequence[Any]]) -> list[ChatSummary]:
    """Rows of CHAT_SUMMARIES and USAGE_BY_CHAT as summaries, newest activity first."""
    by_chat: dict[str, dict[str, UsageTotals]] = {}
    for row in usage:
        by_chat.setdefault(row[0], {})[row[1]] = usage_totals(tuple(row[2:]))
    found = [ChatSummary(chat_key=row[0], session_id=row[1], sessions=int(row[2]),
                         compactions=int(row[3]), last_at=float(max(row[4], row[5])),
                         messages=int(row[6]), usage=by_chat.get(row[0], {}))
             for row in chats]
    return sorted(found, key=lambda chat: (-chat.last_at, chat.chat_key))
