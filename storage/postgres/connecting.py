"""How the PostgreSQL store connects, and how it names what went wrong."""

from __future__ import annotations

import asyncpg

from storage.errors import StoreError
from storage.urls import ambiguous, mask_url

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


def check_url(url: str) -> None:
    """Refuse a URL whose password is written raw with a character a URL reserves: the
    client would read part of the password as the host (and could echo it in an error)."""
    if ambiguous(url):
        raise StoreError(
            f"the password in the database URL {mask_url(url)} holds a raw @, /, ? or #: "
            "percent-encode the password (@ as %40, / as %2F, ? as %3F, # as %23, "
            "% as %25), and any @ after the host")


async def as_it_was(con: asyncpg.Connection) -> None:
    """A connection goes back to the pool without asyncpg's four reset statements (a round
    trip per use): the store never changes a pooled connection's session (no SET, LISTEN,
    cursor or session lock; LISTEN has a connection of its own), and asyncpg still rolls
    back a transaction left open before calling this."""
