"""The gateway driven as a hostile or unlucky user would: races, stops, restarts, edits."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from contextlib import closing

import pytest

from gateway.turns.turn_records import new_message
from tests.harness.engines import install_plugin
from tests.harness.gateway import (
    after_restart,
    close,
    config_for,
    is_summary_request,
    started_gateway,
)
from tests.harness.platform import RecordingPlatform
from tests.harness.waiting import eventually

CHAT = "test:1"


def db_of(tmp_path) -> str:
    return str(tmp_path / "threadline.db")


async def rows(db: str, sql: str, *params) -> list[tuple]:
    with closing(sqlite3.connect(db)) as conn:
        return [tuple(r) for r in conn.execute(sql, params)]


def chat_calls(fake) -> list:
    return [c for c in fake.calls_to("/chat/completions") if not is_summary_request(c.json)]


async def test_status_usage_and_a_message_together_make_one_root_session(tmp_path, fake_openai):
    platform = RecordingPlatform()
    gw = await started_gateway(config_for(tmp_path, fake_openai.base_url), [platform])
    try:
        await asyncio.gather(platform.say("/usage"), platform.say("hello"),
                             platform.say("/status"))
        await platform.wait_delivered(3)
        sessions = await gw.store.list_sessions(CHAT)
        live = await gw.store.live_session(CHAT)
        history = [m.message.get("content") for m in await gw.store.load_history(live.id)]
    finally:
        await close(gw)
    assert len(sessions) == 1, [s.id for s in sessions]
    assert "hello" in history and "echo: hello" in history


async def test_a_reply_the_platform_refused_until_shutdown_is_delivered_after_a_restart(
        tmp_path, fake_openai):
    config = config_for(tmp_path, fake_openai.base_url)
    platform = RecordingPlatform()
    platform.failing_sends = 10**6  # down for as long as this process runs
    gw = await started_gateway(config, [platform])
    try:
        await platform.say("hello", message_id="5")
        await fake_openai.wait_for_call("/chat/completions")
        await asyncio.sleep(2)  # a few tries
    finally:
        await close(gw)  # the drain ends the tries; the reply stays stored
    assert platform.texts() == []
    again = await after_restart(config, 1)
    assert again.texts() == ["echo: hello"]
    assert again.sent[0].reply_to == "5"
    assert len(chat_calls(fake_openai)) == 1, "the stored reply is sent, not asked for again"
    assert await rows(db_of(tmp_path), "SELECT status FROM inbound") == [("answered",)]


async def test_a_stop_that_arrives_during_the_final_write_loses(tmp_path, fake_openai):
    db = db_of(tmp_path)
    release = asyncio.Event()

    async def slow_reply(body):
        await release.wait()
        return "the full answer"

    fake_openai.responder = slow_reply
    platform = RecordingPlatform()
    gw = await started_gateway(config_for(tmp_path, fake_openai.base_url), [platform])
    blocker = sqlite3.connect(db, isolation_level=None)  # another process's connection
    try:
        await platform.say("question", message_id="10")
        await fake_openai.wait_for_call("/chat/completions")
        # Another writer holds the file: /stop's own ledger write waits, and the reply's
        # final write queues right behind it, so the stop lands while that write runs.
        blocker.execute("BEGIN IMMEDIATE")
        stop = asyncio.create_task(platform.say("/stop", message_id="11"))
        await asyncio.sleep(0.2)
        release.set()
        await asyncio.sleep(0.3)
        blocker.execute("COMMIT")
        await stop
        await platform.wait_delivered(2)
        await asyncio.sleep(0.2)
        stored = [m.message.get("content") for m in
                  await gw.store.load_history((await gw.store.live_session(CHAT)).id)]
    finally:
        blocker.close()
        await close(gw)
    texts = platform.texts()
    stopped = any(t.startswith("Stopped") for t in texts)
    replied = "the full answer" in texts
    assert stopped != replied, texts  # the stop wins or loses, never both or neither
    assert ("the full answer" in stored) == replied
    [(status,)] = await rows(db, "SELECT status FROM inbound WHERE message_id = '10'")
    assert status == ("answered" if replied else "failed")


async def test_an_interrupted_command_is_run_as_a_command_after_restart(tmp_path, fake_openai):
    config = config_for(tmp_path, fake_openai.base_url)
    platform = RecordingPlatform()
    gw = await started_gateway(config, [platform])
    try:
        await platform.say("remember PELICAN")
        await platform.wait_delivered(1)
        await gw.store.ingest(platform="test", chat_id="1", message_id="90", chat_key=CHAT,
                              text="/new", sender_id="u1", sender_name="Ada")
    finally:
        await close(gw)
    again = await after_restart(config, 1)
    assert again.texts()[0].startswith("Started a fresh conversation")
    assert len(chat_calls(fake_openai)) == 1


async def test_a_stopped_compress_finishes_its_ledger_row(tmp_path, fake_openai):
    from tests.harness.gateway import after_restart, summarizing_responder

    fake_openai.responder = summarizing_responder
    config = config_for(tmp_path, fake_openai.base_url, model={"context_length": 8192},
                        compression={"protect_last_n": 4})
    platform = RecordingPlatform()
    gw = await started_gateway(config, [platform])
    try:
        session = await gw.conversations.live_session(CHAT)
        await gw.store.append_messages(session.id, [
            new_message({"role": r, "content": f"{r} {i} " + "x" * 300})
            for i in range(10) for r in ("user", "assistant")])
        fake_openai.delay_next(5.0)
        await platform.say("/compress", message_id="30")
        await fake_openai.wait_for_call("/chat/completions")
        await platform.say("/stop", message_id="31")
        await platform.wait_delivered(2)
    finally:
        await close(gw)
    statuses = dict(await rows(db_of(tmp_path), "SELECT message_id, status FROM inbound"))
    assert statuses["30"] in ("answered", "failed")
    again = await after_restart(config, 0, settle=0.3)
    assert again.texts() == []


async def test_a_continuation_keeps_the_metadata_and_the_parent_never_changes(tmp_path,
                                                                           fake_openai):
    from tests.harness.gateway import summarizing_responder

    fake_openai.responder = summarizing_responder
    roomy = config_for(tmp_path, fake_openai.base_url, model={"context_length": 32_000},
                       compression={"protect_last_n": 4})
    gw = await started_gateway(roomy, [RecordingPlatform()])
    session = await gw.conversations.live_session(CHAT)
    await gw.store.append_messages(session.id, [
        new_message({"role": r, "content": f"{r} {i} " + "x" * 800})
        for i in range(14) for r in ("user", "assistant")])
    await close(gw)
    small = config_for(tmp_path, fake_openai.base_url, model={"context_length": 3000,
                                                              "max_output_tokens": 256},
                       compression={"protect_last_n": 4})
    platform = RecordingPlatform()
    gw = await started_gateway(small, [platform])  # hygiene compacts before the next turn
    try:
        await platform.say("continue please", message_id="500")
        await platform.wait_delivered(1)
        tip = await gw.store.live_session(CHAT)
    finally:
        await close(gw)
    assert tip.parent_session_id == session.id
    [(parent_answered,)] = await rows(
        db_of(tmp_path), "SELECT answered FROM messages WHERE session_id = ? AND "
        "platform_message_id = '500'", session.id)
    assert parent_answered == 0, "an ended session never changes"
    [(pid, answered, sender)] = await rows(
        db_of(tmp_path), "SELECT platform_message_id, answered, sender_id FROM messages "
        "WHERE session_id = ? AND content = 'continue please'", tip.id)
    assert (pid, answered, sender) == ("500", 1, "u1")


async def test_a_group_admin_elsewhere_is_still_a_stranger_to_a_closed_bot(tmp_path,
                                                                          fake_openai):
    config = config_for(tmp_path, fake_openai.base_url,
                        gateway={"open": False, "allowed_users": {"telegram": []}})
    platform = RecordingPlatform()
    gw = await started_gateway(config, [platform])
    try:
        await platform.say("hello", user_id="777", chat_id="-100", is_group=True,
                           addressed_to_bot=True, is_admin_hint=True)
        await platform.wait_delivered(1)
    finally:
        await close(gw)
    assert len(platform.texts()) == 1 and "777" in platform.texts()[0]
    assert fake_openai.calls_to("/chat/completions") == []


async def test_a_group_admin_who_is_allowed_may_manage_the_chat(tmp_path, fake_openai):
    config = config_for(tmp_path, fake_openai.base_url,
                        gateway={"open": False, "allowed_users": {"telegram": ["777"]}})
    platform = RecordingPlatform("telegram")
    gw = await started_gateway(config, [platform])
    try:
        await platform.say("/new", user_id="777", chat_id="-100", is_group=True,
                           addressed_to_bot=True, is_admin_hint=True)
        await platform.say("/new", user_id="777", chat_id="-100", is_group=True,
                           addressed_to_bot=True, is_admin_hint=False)
        await platform.wait_delivered(2)
    finally:
        await close(gw)
    allowed, refused = platform.texts()
    assert allowed.startswith("Started a fresh conversation")
    assert refused == "/new is admin-only here."


async def test_a_command_for_another_bot_is_not_ours(tmp_path, fake_openai):
    platform = RecordingPlatform()
    gw = await started_gateway(config_for(tmp_path, fake_openai.base_url), [platform])
    try:
        await platform.say("/help@other_bot")
        await platform.say("/help@Threadline_Bot")
        await platform.wait_delivered(2)
    finally:
        await close(gw)
    [reply] = platform.texts()
    assert "/compress" in reply
    assert fake_openai.calls_to("/chat/completions") == []


@pytest.mark.parametrize("engine", ["drop-oldest", "force-aware"])
async def test_compress_works_with_plugins_of_either_documented_shape(tmp_path, fake_openai,
                                                                     monkeypatch, engine):
    install_plugin(tmp_path, engine, {"drop-oldest": "DropOldest",
                                      "force-aware": "ForceAware"}[engine])
    monkeypatch.setenv("THREADLINE_HOME", str(tmp_path))
    config = config_for(tmp_path, fake_openai.base_url, context={"engine": engine})
    platform = RecordingPlatform()
    gw = await started_gateway(config, [platform])
    try:
        for count, text in enumerate(("one", "two", "three"), start=1):
            await platform.say(text)
            await platform.wait_delivered(count)
        await platform.say("/compress")
        await platform.wait_delivered(4)
        tip = await gw.store.live_session(CHAT)
        kept = await gw.store.load_history(tip.id)
    finally:
        await close(gw)
    assert "Compressed:" in platform.texts()[-1], platform.texts()[-1]
    # system + 6 messages: the spec-shaped plugin drops one, the forced one drops two.
    assert len(kept) == {"drop-oldest": 6, "force-aware": 5}[engine]


async def test_an_edit_of_a_queued_message_is_checked_like_a_new_message(tmp_path, fake_openai):
    config = config_for(tmp_path, fake_openai.base_url, model={"context_length": 3000,
                                                               "max_output_tokens": 256})
    platform = RecordingPlatform()
    gw = await started_gateway(config, [platform])
    fake_openai.delay_next(0.5)
    try:
        await platform.say("first")
        await fake_openai.wait_for_call("/chat/completions")
        queued = await platform.say("short question", message_id="300")
        await platform.handler(platform.message("y" * 40_000, message_id=queued.message_id,
                                                is_edit=True))
        await platform.wait_delivered(2)
    finally:
        await close(gw)
    sent = [c.json["messages"][-1]["content"] for c in fake_openai.calls_to("/chat/completions")]
    assert all(len(text) < 1000 for text in sent)
    assert any("too long" in t for t in platform.texts())
    assert "echo: short question" in platform.texts()


async def test_a_quick_second_message_into_an_idle_chat_is_answered_together(tmp_path,
                                                                            fake_openai):
    config = config_for(tmp_path, fake_openai.base_url, gateway={"coalesce_ms": 1500})
    platform = RecordingPlatform()
    gw = await started_gateway(config, [platform])
    fake_openai.delay_next(0.5)
    try:
        await platform.say("my flight is at 9")
        await asyncio.sleep(0.1)
        await platform.say("and I need a taxi")
        await platform.wait_delivered(2)
        await asyncio.sleep(0.3)
    finally:
        await close(gw)
    assert platform.texts() == ["echo: and I need a taxi"]
    last = chat_calls(fake_openai)[-1].json["messages"]
    assert [m["content"] for m in last[-2:]] == ["my flight is at 9", "and I need a taxi"]


async def test_a_single_message_into_an_idle_chat_never_waits(tmp_path, fake_openai):
    config = config_for(tmp_path, fake_openai.base_url, gateway={"coalesce_ms": 1500})
    platform = RecordingPlatform()
    gw = await started_gateway(config, [platform])
    try:
        started = time.monotonic()
        await platform.say("hello")
        await platform.wait_delivered(1)
        elapsed = time.monotonic() - started
    finally:
        await close(gw)
    assert platform.texts() == ["echo: hello"]
    assert elapsed < 0.5, f"a single message waited {elapsed:.2f}s"


async def test_compress_of_an_unknown_chat_creates_nothing(tmp_path, fake_openai):
    from storage.sqlite import SqliteSessionStore
    from tests.harness.cli import threadline
    from tests.harness.gateway import write_config

    config = str(write_config(tmp_path, model={"base_url": fake_openai.base_url}))
    async with SqliteSessionStore(db_of(tmp_path)):
        pass  # the service made the database; the chat was never in it
    ran = await threadline("compress", "console:typo", "--config", config, home=tmp_path)
    assert ran.code != 0 and "console:typo" in ran.err
    assert await rows(db_of(tmp_path), "SELECT id FROM sessions") == []


async def test_the_sender_of_the_running_turn_may_stop_it_in_a_group(tmp_path, fake_openai):
    platform = RecordingPlatform()
    gw = await started_gateway(config_for(tmp_path, fake_openai.base_url), [platform])
    fake_openai.delay_next(5.0)
    group = {"chat_id": "-5", "is_group": True, "addressed_to_bot": True}
    try:
        await platform.say("write an essay", user_id="u7", **group)
        await fake_openai.wait_for_call("/chat/completions")
        await platform.say("/stop", user_id="u8", **group)
        await platform.say("/stop", user_id="u7", **group)
        await platform.wait_delivered(3)
    finally:
        await close(gw)
    texts = platform.texts()
    assert "admin" in texts[0]
    assert "Stopping." in texts
    assert any(t.startswith("Stopped.") for t in texts)


async def test_a_stored_reply_is_resent_once_however_other_chats_interleave(tmp_path,
                                                                         fake_openai):
    from storage.models import NewMessage, OutChunk, TurnRecord

    config = config_for(tmp_path, fake_openai.base_url)
    gw = await started_gateway(config, [RecordingPlatform()])
    store = gw.store
    rows = {}
    for chat, mid in (("1", "a1"), ("2", "b1"), ("1", "a2")):  # a1, b1, a2 in time order
        rows[mid] = await store.ingest(platform="test", chat_id=chat, message_id=mid,
                                       chat_key=f"test:{chat}", text=f"question {mid}",
                                       sender_id="u1", sender_name="Ada")
    for chat, mids in (("1", ("a1", "a2")), ("2", ("b1",))):
        session = await gw.conversations.live_session(f"test:{chat}")
        ids = [rows[m].id for m in mids]
        await store.take_inbound(ids, session.id, [new_message(
            {"role": "user", "content": f"question {m}"}, platform_message_id=m) for m in mids])
        # The turn was stored, then the process died before the platform took the reply.
        await store.record_turn(session.id, TurnRecord(
            after=(NewMessage({"role": "assistant", "content": f"answer for {chat}"}),),
            replied=tuple(ids), delivery=(OutChunk(f"answer for {chat}"),)))
    await close(gw)
    again = await after_restart(config, 3)
    assert sorted(again.texts()) == ["answer for 1", "answer for 2"]
    assert fake_openai.calls_to("/chat/completions") == []


async def test_a_reply_cut_short_sends_exactly_its_missing_chunks_after_a_restart(tmp_path,
                                                                                  fake_openai):
    words = [f"w{i:03d}" for i in range(120)]
    fake_openai.responder = lambda body: " ".join(words)  # about 600 characters
    config = config_for(tmp_path, fake_openai.base_url)
    platform = RecordingPlatform(max_message_length=100)
    # Chunks 1-2 go; then the platform is down for as long as this process runs.
    platform.fail_after, platform.failing_sends = 2, 10**6
    gw = await started_gateway(config, [platform])
    try:
        await platform.say("talk to me", message_id="40")
        await eventually(lambda: len(platform.sent) == 2)
        await asyncio.sleep(1.5)  # a try or two at chunk 3
        live = await gw.store.live_session(CHAT)
    finally:
        await close(gw)
    first = platform.texts()
    assert len(first) == 2
    assert "[undelivered]" in await threadline_show(tmp_path, live.id)
    again = await after_restart(config, 1)
    sent = first + again.texts()
    assert " ".join(sent).split() == words  # every word once, in order
    assert again.sent[0].reply_to is None  # the continuation is not threaded a second time
    assert len(fake_openai.calls_to("/chat/completions")) == 1
    assert "[undelivered]" not in await threadline_show(tmp_path, live.id)


async def threadline_show(tmp_path, session_id: str) -> str:
    from tests.harness.cli import threadline

    config = str(tmp_path / "config.yaml")
    ran = await threadline("sessions", "show", session_id, "--config", config, home=tmp_path)
    assert ran.code == 0, ran.err
    return ran.out
