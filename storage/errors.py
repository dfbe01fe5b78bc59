"""The store's errors: every SessionStore method raises these kinds only."""

from __future__ import annotations


class StoreError(Exception):
    """The store could not do what was asked (I/O, corruption, newer schema, bad query)."""


class ContinuationConflict(StoreError):
    """The parent session was already continued (or is no longer live): no fork is made."""
