"""The embedded SQLite backend of the SessionStore contract."""

from storage.sqlite.store import SqliteSessionStore

__all__ = ["SqliteSessionStore"]
