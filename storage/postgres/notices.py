"""What a notice between gateway processes carries on PostgreSQL (LISTEN/NOTIFY on one
channel): a chat key, for whoever holds the chat; or, sent by `ingest` as it stores a
message for a chat another process holds, that holder's name, the chat key and the stored
row, so the holder routes it without reading it (storage/postgres/coordination.py)."""

from __future__ import annotations

import json
from dataclasses import replace

from storage import rows
from storage.coordination import Notice

# A notice's payload: the chat key alone (for whoever holds the chat), or, sent by `ingest`
# to the chat's holder, "holder\nchat key\n" and the stored row as JSON (left out when it
# would not fit NOTIFY's 8,000 bytes; the holder then reads it).
NOTICE_ROOM = 7_000


def notice_sql(holder: str, chat_key: str, row: str) -> str:
    """The SQL expression of an addressed notice's payload (for `ingest`'s statement)."""
    return (f"{holder} || E'\\n' || {chat_key} || E'\\n' || CASE WHEN octet_length({row})"
            f" <= {NOTICE_ROOM} THEN {row} ELSE '' END")


def read_notice(payload: str) -> Notice:
    if "\n" not in payload:
        return Notice(payload)
    to, chat_key, body = payload.split("\n", 2)
    record = None
    if body:
        values = json.loads(body)
        record = replace(rows.inbound_record(values[:14]), open_before=tuple(values[14]))
    return Notice(chat_key, to, record)
