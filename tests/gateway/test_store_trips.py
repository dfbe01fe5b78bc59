"""What a turn costs the store: at most 6 calls (trips to the store's writer), and none of
them to find the chat's session while this process knows it."""

from __future__ import annotations

import asyncio

from storage.sqlite import SqliteSessionStore
from tests.harness.gateway import close, config_for, started_gateway
from tests.harness.platform import RecordingPlatform

MAX_STORE_CALLS_PER_TURN = 6  # issue 17


async def _settled(store: SqliteSessionStore) -> int:
    """The store's call count once the gateway has stopped writing."""
    while True:
        calls = store.stats.calls
        await asyncio.sleep(0.05)
        if store.stats.calls == calls:
            return calls


async def test_a_turn_makes_at_most_six_store_calls(tmp_path, fake_openai) -> None:
    platform = RecordingPlatform()
    gw = await started_gateway(config_for(tmp_path, fake_openai.base_url), [platform])
    store = gw.store
    assert isinstance(store, SqliteSessionStore)
    try:
        start = await _settled(store)
        await platform.say("first")  # a new chat: its root session, its agent built
        await platform.wait_delivered(1)
        before = await _settled(store)
        assert before - start <= MAX_STORE_CALLS_PER_TURN, before - start
        for n in range(2, 6):
            await platform.say(f"message {n}")
            await platform.wait_delivered(n)
        per_turn = (await _settled(store) - before) / 4
        assert per_turn <= MAX_STORE_CALLS_PER_TURN, per_turn
        assert platform.texts()[-1] == "echo: message 5"
    finally:
        await close(gw)


async def test_the_chats_session_is_found_without_the_store_after_its_first_turn(
        tmp_path, fake_openai) -> None:
    platform = RecordingPlatform()
    gw = await started_gateway(config_for(tmp_path, fake_openai.base_url), [platform])
    store = gw.store
    assert isinstance(store, SqliteSessionStore)
    try:
        await platform.say("first")
        await platform.wait_delivered(1)
        await _settled(store)
        reads = store.stats.by_kind["read"]
        await platform.say("second")
        await platform.wait_delivered(2)
        await _settled(store)
        # The one read left in a turn is the ledger row (an edit may have changed it).
        assert store.stats.by_kind["read"] - reads == 1
    finally:
        await close(gw)
