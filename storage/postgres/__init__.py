"""The PostgreSQL backend of the SessionStore contract, for several gateway processes."""

from storage.postgres.store import PostgresSessionStore

__all__ = ["PostgresSessionStore"]
