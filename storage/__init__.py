"""Persistence: the SessionStore interface, its values, and the embedded SQLite backend."""

from storage.base import SessionStore
from storage.errors import ContinuationConflict, StoreError
from storage.models import (
    Compaction,
    InboundRecord,
    NewMessage,
    SearchHit,
    SessionRecord,
    StoredMessage,
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
