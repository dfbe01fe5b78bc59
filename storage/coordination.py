"""What several gateway processes sharing one database agree through it (docs/scale-out.md).

A *lease* is a named right with a holder and an expiry, kept in the database and judged
by the database's clock: `chat:<key>` lets one process run that chat's turns, `poll:<platform>`
lets one process poll a platform. A holder renews its leases while it lives; a dead
holder's leases expire and anyone may take them. *Notices* wake the holder of a chat when
another process stored a message for it. Only a store shared between processes has this
(`SessionStore.coordination`); the embedded SQLite store serves one process and has none.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Collection


class Coordination(ABC):
    @abstractmethod
    async def claim(self, name: str, holder: str, ttl: float) -> bool:
        """Take the lease when it is free, expired or already ours (then renew it)."""

    @abstractmethod
    async def renew(self, holder: str, ttl: float, names: Collection[str]) -> set[str]:
        """Extend those of the leases `names` that `holder` still holds; returns their
        names. A lease the holder no longer counts as its own is left to expire, so the
        chat it names is swept up by whoever is alive."""

    @abstractmethod
    async def release(self, name: str, holder: str) -> None:
        """Give a lease up (only when `holder` holds it)."""

    @abstractmethod
    async def unattended_chats(self) -> list[str]:
        """Chat keys with open ledger rows and no live chat lease: work nobody is doing."""

    @abstractmethod
    async def notify(self, chat_key: str) -> None:
        """Tell whoever holds the chat that it has a new message."""

    @abstractmethod
    async def listen(self, callback: Callable[[str], None],
                     reconnected: Callable[[], None] = lambda: None) -> None:
        """Call `callback(chat_key)` on every notice, from now until the store shuts down.
        A lost connection is made again (with growing pauses) for as long as that lasts;
        `reconnected()` is called then, since notices sent meanwhile were missed."""
