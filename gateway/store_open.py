"""Opening the configured store, light enough for the read-only commands: it imports the
config and the storage backends only (no providers, no platform libraries).

Who may upgrade the schema (docs/operations.md, "Upgrades"): the service (`run`, `chat`)
and `migrate`. `web` and `compress` need the current schema; `sessions` and `doctor` read
without changing a byte; `backup` copies any schema this release knows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.config import Config
    from storage.base import SessionStore
    from storage.sqlite.opening import Access


def build_store(config: Config, access: Access = "upgrade") -> SessionStore:
    """PostgreSQL when `storage.url` is set, else the embedded SQLite file."""
    if config.storage.url:
        from storage.postgres import PostgresSessionStore  # asyncpg only when it is used
        return PostgresSessionStore(config.storage.url, upgrade=access == "upgrade")
    from storage.sqlite import SqliteSessionStore

    return SqliteSessionStore(config.db_path, access=access)
