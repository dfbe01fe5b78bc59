"""The store's errors: every SessionStore method raises these kinds only."""

from __future__ import annotations


class StoreError(Exception):
    """The store could not do what was asked (I/O, corruption, newer schema, bad query)."""


class StoreUnavailable(StoreError):
    """The database could not be reached (refused, cut, restarting, timed out): nothing
    was done, and the same call may work once it is back."""


class InboundChanged(StoreError):
    """A ledger row was edited or finished since the caller read it: nothing was taken;
    read the rows again."""


class LeaseLost(StoreError):
    """Another process holds the chat now (this one's lease lapsed and was taken): the
    write was refused whole; the turn is dropped unsaid (docs/scale-out.md, "Fencing")."""


class ContinuationConflict(StoreError):
    """The parent session was already continued (or is no longer live): no fork is made."""
