"""What both stores add to their spend counters when usage rows are stored."""

from __future__ import annotations

from collections.abc import Sequence

from storage.models import UsageRecord


def by_key(usage: Sequence[UsageRecord]) -> list[tuple[str, float, int]]:
    """(key, usd, tokens) summed per spend key, in key order: one upsert per counter row,
    and concurrent turns lock the rows they share in the same order."""
    sums: dict[str, tuple[float, int]] = {}
    for u in usage:
        for key in dict.fromkeys(u.spend_keys):  # a key named twice counts once
            usd, tokens = sums.get(key, (0.0, 0))
            sums[key] = (usd + u.usd, tokens + u.spent_tokens)
    return [(key, usd, tokens) for key, (usd, tokens) in sorted(sums.items())]
