"""Persistence: the SessionStore interface, its values, and the embedded SQLite backend."""

from storage.base import SessionStore
from storage.errors import ContinuationConflict, StoreError
from storage.models import (
    Compaction,
    Delivery,
    InboundRecord,
    NewMessage,
    OutChunk,
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
    "Delivery",
    "InboundRecord",
    "NewMessage",
    "OutChunk",
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
