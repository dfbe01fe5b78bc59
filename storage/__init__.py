"""Persistence: the SessionStore interface, its values, and the embedded SQLite backend."""

from storage.base import SessionStore
from storage.models import (
    Compaction,
    ContinuationConflict,
    InboundRecord,
    NewMessage,
    SearchHit,
    SessionRecord,
    StoredMessage,
    StoreError,
    TurnRecord,
    UsageRecord,
    UsageTotals,
)
from storage.sqlite import SqliteSessionStore

__all__ = [
    "Compaction",
    "ContinuationConflict",
    "InboundRecord",
    "NewMessage",
    "SearchHit",
    "SessionRecord",
    "SessionStore",
    "SqliteSessionStore",
    "StoreError",
    "StoredMessage",
    "TurnRecord",
    "UsageRecord",
    "UsageTotals",
]
