"""Where a catch-up starts reading: each chat's newest ledger row, on both backends."""

from __future__ import annotations

from storage.base import SessionStore


async def _ingest(store: SessionStore, platform: str, chat_id: str, message_id: str) -> None:
    await store.ingest(platform=platform, chat_id=chat_id, message_id=message_id,
                       chat_key=f"{platform}:{chat_id}", text="hi", sender_id="u1",
                       sender_name="Ada", extra={"is_group": chat_id == "g"})


async def test_the_newest_row_of_each_chat_whatever_its_status(store: SessionStore) -> None:
    for chat_id, message_id in (("dm", "100"), ("g", "205"), ("dm", "101"), ("g", "206")):
        await _ingest(store, "discord", chat_id, message_id)
    await _ingest(store, "telegram", "dm", "999")
    newest = {r.chat_key: r for r in await store.latest_inbound("discord")}
    await store.finish_inbound([newest["discord:g"].id], "answered")
    again = {r.chat_key: (r.message_id, r.extra["is_group"])
             for r in await store.latest_inbound("discord")}
    assert again == {"discord:dm": ("101", False), "discord:g": ("206", True)}
    assert await store.latest_inbound("console") == []
