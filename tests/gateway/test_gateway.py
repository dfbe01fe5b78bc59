"""The gateway core: order, once-only, concurrency, failures, commands, recovery."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from contextlib import closing

import pytest

from platforms.base import Attachment
from tests.harness.fake_openai import FakeOpenAI
from tests.harness.gateway import after_restart, close, config_for, started_gateway
from tests.harness.platform import RecordingPlatform


@pytest.fixture
def platform() -> RecordingPlatform:
    return RecordingPlatform()


async def test_two_messages_at_once_are_answered_in_order(tmp_path, fake_openai, platform):
    gw = await started_gateway(config_for(tmp_path, fake_openai.base_url), [platform])
    try:
        # The second arrives while the first is with the model. (Two in the same instant
        # are one burst, answered together: test_messages_queued_behind_a_turn_are_answered_together.)
        await platform.say("first")
        await platform.say("second")
        await platform.wait_delivered(2)
        assert platform.texts() == ["echo: first", "echo: second"]
        second = fake_openai.calls_to("/chat/completions")[1].json["messages"]
        # The second request carries the first exchange.
        assert [m["content"] for m in second[1:]] == ["first", "echo: first", "second"]
    finally:
        await close(gw)


async def test_redelivered_message_gets_one_reply_even_after_restart(tmp_path, fake_openai,
                                                                     platform):
    config = config_for(tmp_path, fake_openai.base_url)
    gw = await started_gateway(config, [platform])
    msg = platform.message("only once", message_id="42")
    try:
        await platform.handler(msg)
        await platform.handler(msg)
        await platform.wait_delivered(2)
    finally:
        await close(gw)
    again = RecordingPlatform()
    gw = await started_gateway(config, [again])
    try:
        await again.handler(msg)
        await again.wait_delivered(1)
    finally:
        await close(gw)
    assert platform.texts() == ["echo: only once"]
    assert again.texts() == []
    assert len(fake_openai.calls_to("/chat/completions")) == 1


async def test_different_chats_run_concurrently(tmp_path, fake_openai, platform):
    gw = await started_gateway(config_for(tmp_path, fake_openai.base_url), [platform])
    fake_openai.delay_next(0.6, times=2)
    try:
        started = time.monotonic()
        await asyncio.gather(platform.say("a", chat_id="1"), platform.say("b", chat_id="2"))
        await platform.wait_delivered(2)
        elapsed = time.monotonic() - started
    finally:
        await close(gw)
    assert sorted(platform.texts()) == ["echo: a", "echo: b"]
    assert elapsed < 1.1, f"two chats took {elapsed:.2f}s: they ran one after the other"


async def test_a_message_arriving_as_the_adapter_starts_is_answered_once(
        tmp_path, fake_openai, platform):
    platform.on_start = ["early"]  # read while the gateway looks for last run's leftovers
    gw = await started_gateway(config_for(tmp_path, fake_openai.base_url), [platform])
    try:
        await platform.wait_delivered(1)
        await asyncio.sleep(0.3)
        assert platform.texts() == ["echo: early"]
        assert len(fake_openai.calls_to("/chat/completions")) == 1
    finally:
        await close(gw)


async def test_messages_queued_behind_a_turn_are_answered_together(tmp_path, fake_openai,
                                                                   platform):
    config = config_for(tmp_path, fake_openai.base_url, gateway={"coalesce_ms": 200})
    gw = await started_gateway(config, [platform])
    fake_openai.delay_next(0.8)
    try:
        await platform.say("one")
        await fake_openai.wait_for_call("/chat/completions")
        await asyncio.sleep(0.3)  # past coalesce_ms: "one" is answered on its own
        await platform.say("two")
        await platform.say("three")
        await platform.wait_delivered(3)
    finally:
        await close(gw)
    assert platform.texts() == ["echo: one", "echo: three"]
    last = fake_openai.calls_to("/chat/completions")[-1].json["messages"]
    assert [m["content"] for m in last[-2:]] == ["two", "three"]
    assert len(fake_openai.calls_to("/chat/completions")) == 2


async def unanswered_rows(db: str) -> list[tuple[str, int]]:
    with closing(sqlite3.connect(db)) as conn:
        rows = conn.execute(
            "SELECT content, answered FROM messages WHERE role='user' ORDER BY id").fetchall()
    return [(r[0], r[1]) for r in rows]


@pytest.mark.parametrize("failure", ["down", "500", "timeout"])
async def test_provider_failure_gets_one_sentence_and_next_message_works(
        tmp_path, platform, failure):
    fake = FakeOpenAI()
    await fake.start()
    config = config_for(tmp_path, fake.base_url, model={"timeout_s": 0.5})
    gw = await started_gateway(config, [platform])
    try:
        if failure == "down":
            await fake.stop()
        elif failure == "500":
            fake.fail_next(500)
        else:
            fake.delay_next(2.0)
        await platform.say("are you there?")
        await platform.wait_delivered(1)
        [apology] = platform.texts()
        assert apology.endswith(".") and "\n" not in apology and "Traceback" not in apology
        assert await unanswered_rows(str(tmp_path / "threadline.db")) == [("are you there?", 0)]
        if failure == "down":
            await fake.start()
        await platform.say("hello again")
        await platform.wait_delivered(2)
        assert platform.texts()[-1] == "echo: hello again"
        assert await unanswered_rows(str(tmp_path / "threadline.db")) == [
            ("are you there?", 0), ("hello again", 1)]
    finally:
        await close(gw)
        await fake.stop()


async def test_commands_never_reach_the_model(tmp_path, fake_openai, platform):
    gw = await started_gateway(config_for(tmp_path, fake_openai.base_url), [platform])
    try:
        # /stop answers at once, the others in the chat's order: one at a time here.
        for n, text in enumerate(("/help", "/HELP@threadline_bot", "/status", "/usage",
                                  "/stop", "/frobnicate"), start=1):
            await platform.say(text)
            await platform.wait_delivered(n)
    finally:
        await close(gw)
    help_reply, help_again, status, usage, stop, unknown = platform.texts()
    assert "/compress" in help_reply and help_again == help_reply
    assert "Model: fake-model" in status and "Session:" in status
    assert "Input: 0" in usage and "Calls: 0" in usage
    assert stop == "Nothing to stop."
    assert unknown.startswith("Unknown command /frobnicate")
    assert fake_openai.calls_to("/chat/completions") == []


async def test_new_starts_a_fresh_session(tmp_path, fake_openai, platform):
    gw = await started_gateway(config_for(tmp_path, fake_openai.base_url), [platform])
    try:
        await platform.say("remember PELICAN")
        await platform.say("/new")
        await platform.say("what did I say?")
        await platform.wait_delivered(3)
    finally:
        await close(gw)
    assert platform.texts()[1].startswith("Started a fresh conversation")
    last = fake_openai.calls_to("/chat/completions")[-1].json["messages"]
    assert all("PELICAN" not in str(m["content"]) for m in last)


async def test_stop_cancels_the_running_turn(tmp_path, fake_openai, platform):
    gw = await started_gateway(config_for(tmp_path, fake_openai.base_url), [platform])
    fake_openai.delay_next(5.0)
    try:
        await platform.say("write a very long essay")
        await fake_openai.wait_for_call("/chat/completions")
        started = time.monotonic()
        await platform.say("/stop")
        await platform.wait_delivered(2)
        assert time.monotonic() - started < 2.0
        await platform.say("short one")
        await platform.wait_delivered(3)
    finally:
        await close(gw)
    assert "Stopping." in platform.texts()
    assert any(t.startswith("Stopped.") for t in platform.texts())
    assert platform.texts()[-1] == "echo: short one"


async def test_unanswered_messages_are_answered_after_restart(tmp_path, fake_openai, platform):
    config = config_for(tmp_path, fake_openai.base_url)
    gw = await started_gateway(config, [platform])
    await gw.store.ingest(platform="test", chat_id="1", message_id="77", chat_key="test:1",
                          text="stored before a crash", sender_id="u1", sender_name="Ada")
    await close(gw)
    again = await after_restart(config, 1)
    assert again.texts() == ["echo: stored before a crash"]


async def test_bad_input_gets_a_short_answer(tmp_path, fake_openai, platform):
    config = config_for(tmp_path, fake_openai.base_url, model={"context_length": 4096})
    gw = await started_gateway(config, [platform])
    try:
        await platform.say("   ")
        await platform.say("", attachments=(Attachment("sticker", ref="s1"),))
        await platform.say("x" * 50_000)
        await platform.say("hi", user_id="bot", is_bot=True)
        await platform.wait_delivered(3)
    finally:
        await close(gw)
    empty, sticker, huge = platform.texts()
    assert empty == "That message was empty."
    assert "sticker" in sticker
    assert "too long" in huge
    assert fake_openai.calls_to("/chat/completions") == []


async def test_strangers_are_refused_once_per_hour(tmp_path, fake_openai, platform):
    config = config_for(tmp_path, fake_openai.base_url, gateway={"open": False})
    gw = await started_gateway(config, [platform])
    try:
        await platform.say("hello", user_id="999")
        await platform.say("hello?", user_id="999")
        await platform.wait_delivered(2)
    finally:
        await close(gw)
    assert len(platform.texts()) == 1 and "999" in platform.texts()[0]
    assert fake_openai.calls_to("/chat/completions") == []



async def test_an_edit_of_a_queued_message_replaces_its_text(tmp_path, fake_openai, platform,
                                                             caplog):
    gw = await started_gateway(config_for(tmp_path, fake_openai.base_url), [platform])
    fake_openai.delay_next(0.5)
    try:
        await platform.say("first")
        await fake_openai.wait_for_call("/chat/completions")
        queued = await platform.say("helo", message_id="200")
        await platform.handler(platform.message("hello, fixed", message_id=queued.message_id,
                                                is_edit=True))
        await platform.wait_delivered(2)
        with caplog.at_level(logging.INFO, logger="gateway"):
            await platform.handler(platform.message("too late", message_id="200",
                                                    is_edit=True))
        await asyncio.sleep(0.2)
        stored = [m.message["content"] for m in
                  await gw.store.load_history((await gw.store.live_session("test:1")).id)]
    finally:
        await close(gw)
    assert platform.texts() == ["echo: first", "echo: hello, fixed"]
    # The edit of an answered message is logged and ignored: no text changes, no model call.
    assert "too late" not in stored and "hello, fixed" in stored
    assert len(fake_openai.calls_to("/chat/completions")) == 2
    assert "edit of 200" in caplog.text and "ignored" in caplog.text


async def test_a_new_command_is_one_entry_in_the_table(tmp_path, fake_openai, platform):
    from gateway.turns.commands import Command, default_commands
    from gateway.wiring import create_gateway

    async def ping(call) -> str:
        return f"pong {call.args}".strip()

    table = default_commands()
    table.add(Command("ping", "check that the bot is there", ping, aliases=("p",)))
    gw = create_gateway(config_for(tmp_path, fake_openai.base_url), [platform], commands=table)
    async with gw:
        await gw.start()
        await platform.say("/ping hello")
        await platform.say("/P@threadline_bot")
        await platform.say("/help")
        await platform.wait_delivered(3)
    pong, short, help_text = platform.texts()
    assert (pong, short) == ("pong hello", "pong")
    assert "/ping - check that the bot is there" in help_text
    assert ("ping", "check that the bot is there") in platform.menu  # the platform's menu too
    assert fake_openai.calls_to("/chat/completions") == []
