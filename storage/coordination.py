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
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from storage.models import InboundRecord


@dataclass(frozen=True)
class Fence:
    """One take of a chat's lease. Every claim that succeeds gives the lease a new
    generation (`epoch`, unique across the database; a renewal keeps it), so work begun
    under one take can tell that the chat was lost, or lost and taken back, meanwhile:
    the store refuses its writes and the outbound path its sends (docs/scale-out.md,
    "Fencing")."""

    chat_key: str
    epoch: int


@dataclass(frozen=True)
class Notice:
    """A chat has a message a process did not route itself. `to`: the process it is for
    (the chat's holder when it was stored), None for whoever holds or may take the chat;
    `record`: the message's ledger row as stored, when it came with the notice (the holder
    then need not read it)."""

    chat_key: str
    to: str | None = None
    record: InboundRecord | None = None


# The take the work running now was begun under. It travels with the work as a context
# variable, so every write and send made for a chat's batch carries it, also from the tasks
# the batch starts (previews, typing), and nothing has to remember to pass it on. Work done
# for no chat in particular (the adapters' intake, the cluster's own loops) carries none.
_FENCE: ContextVar[Fence | None] = ContextVar("threadline_fence", default=None)


def current_fence() -> Fence | None:
    return _FENCE.get()


@contextmanager
def fenced(fence: Fence | None) -> Iterator[None]:
    """Run the block's work under `fence` (None: under none)."""
    token = _FENCE.set(fence)
    try:
        yield
    finally:
        _FENCE.reset(token)


class Coordination(ABC):
    # When the notice connection last proved to work (unix seconds): made, or answered a
    # ping (every 15 s on PostgreSQL). For the health metric of the listening loop.
    listening_ok_at: float = 0.0

    @abstractmethod
    async def claim(self, name: str, holder: str, ttl: float, *,
                    take_expired: bool = True) -> int | None:
        """Take the lease when it is free, already ours, or (`take_expired`) expired: its
        new generation; None when another holds it. Every claim that succeeds starts a new
        generation, also one that finds the lease already ours."""

    @abstractmethod
    async def renew(self, holder: str, ttl: float, names: Collection[str]) -> set[str]:
        """Extend those of the leases `names` that `holder` still holds; returns their
        names. A lease the holder no longer counts as its own is left to expire, so the
        chat it names is swept up by whoever is alive."""

    @abstractmethod
    async def release(self, name: str, holder: str, epoch: int | None = None) -> None:
        """Give a lease up, only when `holder` holds it (and, given `epoch`, still at that
        generation: a release never deletes a newer take)."""

    @abstractmethod
    async def unattended_chats(self, *, expired: bool = True) -> list[str]:
        """Chat keys with open ledger rows and no chat lease (`expired`: or an expired
        one): work nobody is doing."""

    @abstractmethod
    async def notify(self, chat_key: str) -> None:
        """Tell whoever holds the chat that it has a new message."""

    @abstractmethod
    async def listen(self, callback: Callable[[Notice], None],
                     reconnected: Callable[[], None] = lambda: None) -> None:
        """Call `callback(notice)` on every notice, from now until the store shuts down
        (notices addressed to other processes included: the callback tells them apart).
        A lost connection is made again (with growing pauses) for as long as that lasts;
        `reconnected()` is called then, since notices sent meanwhile were missed."""
