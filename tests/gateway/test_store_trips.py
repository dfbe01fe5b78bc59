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
        # No read at all: the session is known, and the ledger row is taken as it was
        # read (the take itself refuses a row edited meanwhile).
        assert store.stats.by_kind["read"] - reads == 0
    finally:
        await close(gw)


async def _reads_for_chat_one_again(tmp_path, fake_openai, cached: int) -> int:
    """Chat 1 speaks, chat 2 speaks, chat 1 speaks again: the store reads of that last turn.

    Also checks that chat 1's second request still carries its first message."""
    tmp_path.mkdir()
    platform = RecordingPlatform()
    config = config_for(tmp_path, fake_openai.base_url, gateway={"cached_agents": cached})
    gw = await started_gateway(config, [platform])
    store = gw.store
    assert isinstance(store, SqliteSessionStore)
    try:
        await platform.say("remember the word teal", chat_id="1")
        await platform.wait_delivered(1)
        await platform.say("hello from chat two", chat_id="2")
        await platform.wait_delivered(2)
        await _settled(store)
        reads = store.stats.by_kind["read"]
        await platform.say("which word?", chat_id="1")
        await platform.wait_delivered(3)
        await _settled(store)
        sent = fake_openai.calls_to("/chat/completions")[-1].json["messages"]
        said = [m["content"] for m in sent if m["role"] == "user"]
        assert said[-2:] == ["remember the word teal", "which word?"], said
        return store.stats.by_kind["read"] - reads
    finally:
        await close(gw)


async def test_a_chat_beyond_cached_agents_is_rebuilt_from_the_store(tmp_path, fake_openai
                                                                     ) -> None:
    # gateway.cached_agents bounds the agents held in memory: with room for one, chat 2
    # pushes chat 1's agent out and chat 1's next turn reads its history back; with room
    # for two, that turn reads nothing. Either way the model sees the history.
    assert await _reads_for_chat_one_again(tmp_path / "two", fake_openai, cached=2) == 0
    assert await _reads_for_chat_one_again(tmp_path / "one", fake_openai, cached=1) > 0
