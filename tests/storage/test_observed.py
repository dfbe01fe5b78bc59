"""Room context in the store, on both backends (issue 36): each kept group message is shown
with exactly one mention, a redelivered one is kept once, and the age limit holds."""

from __future__ import annotations

import time

from storage.base import SessionStore
from storage.models import ObservedMessage

CHAT = "telegram:-100"


def kept(n: int, at: float) -> ObservedMessage:
    return ObservedMessage("telegram", CHAT, f"o{n}", "7", "Alice", f"said {n}", at)


async def ingest(store: SessionStore, n: int):
    record = await store.ingest(platform="telegram", chat_id="-100", message_id=f"m{n}",
                                chat_key=CHAT, text=f"mention {n}", sender_id="7",
                                sender_name="Alice", extra={"is_group": True})
    assert record is not None
    return record


async def test_each_kept_message_falls_between_two_mentions(store: SessionStore) -> None:
    start = time.time()
    for n in range(3):
        await store.observe(kept(n, start - 10 + n))
    await store.observe(kept(0, start))  # a redelivery: kept once
    first = await ingest(store, 1)
    for n in range(3, 5):
        await store.observe(kept(n, time.time()))
    second = await ingest(store, 2)
    other = ObservedMessage("telegram", "telegram:-200", "o9", "7", "A", "elsewhere",
                            time.time())
    await store.observe(other)

    shown = await store.observed(CHAT, first.id, first.received_at, 0, 50)
    assert [m.text for m in shown] == ["said 2", "said 1", "said 0"]  # newest first
    assert [m.text for m in await store.observed(CHAT, first.id, first.received_at, 0, 2)
            ] == ["said 2", "said 1"]
    later = await store.observed(CHAT, second.id, second.received_at, 0, 50)
    assert [m.text for m in later] == ["said 4", "said 3"]  # never the ones shown before
    recent = await store.observed(CHAT, first.id, first.received_at, start - 8.5, 50)
    assert [m.text for m in recent] == ["said 2"]  # older than the age limit: left out
