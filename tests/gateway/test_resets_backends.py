"""A chat goes on after it is reset, on SQLite and on PostgreSQL alike (issue 47, point 1):
after /new, after an idle reset on the test clock, and for a chat copied by `threadline
migrate` from a SQLite file whose last session /new had ended, the next five messages are
each answered, each on a fresh root session. On PostgreSQL the gateway runs as a cluster
member (leases, fenced writes), as `threadline run` does there."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from gateway.service.app import Gateway
from gateway.turns.resets import NOTICES
from gateway.wiring import create_gateway
from storage.migrate import copy_store
from tests.gateway.test_resets import Clock
from tests.harness.gateway import close, config_for
from tests.harness.platform import RecordingPlatform

CHAT = "test:1"
FIVE = [f"message {n} after the reset" for n in range(1, 6)]


@pytest.fixture(params=["sqlite", "postgres"])
async def storage(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    """The `storage:` section of a gateway on each backend (a new database of its own)."""
    if request.param == "sqlite":
        return {"path": str(tmp_path / "threadline.db")}
    server = request.getfixturevalue("postgres_server")
    return {"url": await server.fresh_database()}


async def _started(tmp_path: Path, base_url: str, storage: dict[str, Any],
                   platform: RecordingPlatform, clock: Clock | None = None,
                   **gateway: Any) -> Gateway:
    config = config_for(tmp_path, base_url, storage=storage,
                        gateway={"open": True, "coalesce_ms": 0, **gateway})
    gw = create_gateway(config, [platform], **({"clock": clock} if clock else {}))
    await gw.initialize()
    await gw.start()
    return gw


async def _five_answered(gw: Gateway, platform: RecordingPlatform, before: int) -> None:
    for n, text in enumerate(FIVE, start=1):
        await platform.say(text)
        await platform.wait_delivered(before + n)
    assert platform.texts()[-5:] == [f"echo: {text}" for text in FIVE]
    live = await gw.store.live_session(CHAT)
    assert live is not None and live.kind == "root" and live.parent_session_id is None


async def test_after_new_the_next_five_messages_are_answered(
        tmp_path, fake_openai, storage) -> None:
    platform = RecordingPlatform()
    gw = await _started(tmp_path, fake_openai.base_url, storage, platform)
    try:
        await platform.say("hello")
        await platform.say("/new")
        await platform.wait_delivered(2)
        first = platform.texts()
        await _five_answered(gw, platform, 2)
    finally:
        await close(gw)
    assert first == ["echo: hello", "Started a fresh conversation. The old one stays stored."]
    # And after a restart, which remembers nothing of the chat: still the same root.
    platform = RecordingPlatform()
    gw = await _started(tmp_path, fake_openai.base_url, storage, platform)
    try:
        await platform.say("still there?", message_id="after-the-restart")
        await platform.wait_delivered(1)
    finally:
        await close(gw)
    assert platform.texts() == ["echo: still there?"]


async def test_after_an_idle_reset_the_next_five_messages_are_answered(
        tmp_path, fake_openai, storage) -> None:
    platform, clock = RecordingPlatform(), Clock()
    gw = await _started(tmp_path, fake_openai.base_url, storage, platform, clock,
                        session_reset={"mode": "idle", "idle_minutes": 30})
    try:
        await platform.say("hello")
        await platform.wait_delivered(1)
        clock.ahead = dt.timedelta(minutes=31)
        assert await gw.resets.sweep() == 1
        clock.ahead = dt.timedelta()
        await _five_answered(gw, platform, 1)
    finally:
        await close(gw)
    assert platform.texts()[:2] == ["echo: hello", NOTICES["idle"]]


async def test_a_chat_migrated_after_its_new_answers_the_next_five_messages(
        tmp_path, fake_openai, storage) -> None:
    source = tmp_path / "before" / "threadline.db"
    source.parent.mkdir()
    platform = RecordingPlatform()
    gw = await _started(tmp_path / "before", fake_openai.base_url, {"path": str(source)},
                        platform)
    try:
        await platform.say("hello")
        await platform.say("/new")
        await platform.wait_delivered(2)
    finally:
        await close(gw)
    if "url" in storage:
        await copy_store(source, storage["url"])
    else:  # the SQLite file goes on as it is: the same chat, the same rules
        storage = {"path": str(source)}
    platform = RecordingPlatform()
    for _ in range(2):  # the first run's message ids: the new run's start after them
        platform.message("")
    gw = await _started(tmp_path, fake_openai.base_url, storage, platform)
    try:
        await _five_answered(gw, platform, 0)
    finally:
        await close(gw)
