"""How the PostgreSQL store connects, and how it names what went wrong."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

import asyncpg

RETRIES = 5  # a transaction PostgreSQL aborted for a deadlock or serialization is re-run
RETRYABLE = (asyncpg.DeadlockDetectedError, asyncpg.SerializationError)
# Our transactions take milliseconds: one idle for seconds belongs to a process that is
# paused or stuck, and the server ends it so its locks stop holding the other processes
# up (docs/scale-out.md, "A paused process").
SESSION_SETTINGS = {"idle_in_transaction_session_timeout": "5000"}
# The database out of reach (refused, cut, shutting down or starting, too slow to answer).
UNREACHABLE = (OSError, TimeoutError, asyncpg.PostgresConnectionError,
               asyncpg.exceptions.OperatorInterventionError, asyncpg.InterfaceError,
               asyncpg.InternalClientError)  # a connection left mid-operation by a cut


def display_url(url: str) -> str:
    """The URL without its password, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username}@{host}" if parts.username else host
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit(parts._replace(netloc=netloc))


async def as_it_was(con: asyncpg.Connection) -> None:
    """A connection goes back to the pool without asyncpg's four reset statements (a round
    trip per use): the store never changes a pooled connection's session (no SET, LISTEN,
    cursor or session lock; LISTEN has a connection of its own), and asyncpg still rolls
    back a transaction left open before calling this."""
