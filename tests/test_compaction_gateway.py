"""Compaction in the live gateway: races, overflow recovery, /compress, hygiene."""

from __future__ import annotations

import asyncio
import logging

from gateway.app import create_gateway
from gateway.conversation import new_message
from tests.harness.fake_openai import openai_error
from tests.harness.platform import RecordingPlatform
from tests.support import (
    close,
    config_for,
    is_summary_request,
    started_gateway,
    summarizing_responder,
)

CHAT = "test:1"


def summary_calls(fake) -> list:
    return [c for c in fake.calls_to("/chat/completions") if is_summary_request(c.json)]


def chat_calls(fake) -> list:
    return [c for c in fake.calls_to("/chat/completions") if not is_summary_request(c.json)]


async def seed(gateway, turns: int, size: int = 400) -> str:
    """A stored conversation of `turns` exchanges, each message about size/4 tokens."""
    session = await gateway.conversations.live_session(CHAT)
    msgs = []
    for i in range(turns):
        msgs.append(new_message({"role": "user", "content": f"question {i} " + "q" * size}))
        msgs.append(new_message({"role": "assistant", "content": f"answer {i} " + "a" * size}))
    await gateway.store.append_messages(session.id, msgs)
    return session.id


async def continuations_of(store, session_id: str) -> list:
    return [s for s in await store.list_sessions(CHAT) if s.parent_session_id == session_id]


async def test_manual_and_automatic_compaction_racing_make_one_continuation(tmp_path,
                                                                         fake_openai):
    fake_openai.responder = summarizing_responder
    config = config_for(tmp_path, fake_openai.base_url, model={"context_length": 4096},
                        compression={"protect_last_n": 4})
    platform = RecordingPlatform()
    running = await started_gateway(config, [platform])
    operator = create_gateway(config, [])  # `threadline compress` from a shell: own store
    await operator.initialize()
    try:
        root = await seed(running, 12)
        fake_openai.delay_next(0.3, times=2)  # both summaries are in flight at once
        await asyncio.gather(platform.say("next question", chat_id="1"),
                             operator.conversations.compact(CHAT, None))
        await platform.wait_delivered(1)
        assert len(await continuations_of(running.store, root)) == 1
        sessions = await running.store.list_sessions(CHAT)
        assert sum(1 for s in sessions if s.end_reason is None) == 1
        assert platform.texts()[0] == "echo: next question"
        tip = await running.store.live_session(CHAT)
        history = [m.message["content"] for m in await running.store.load_history(tip.id)]
        assert "echo: next question" in history
    finally:
        await operator.shutdown()
        await close(running)


async def test_overflow_with_a_stated_smaller_limit_lowers_the_window_and_retries(
        tmp_path, fake_openai):
    fake_openai.responder = summarizing_responder
    fake_openai.context_limit = 1500
    config = config_for(tmp_path, fake_openai.base_url, model={"context_length": 8192},
                        compression={"protect_last_n": 4})
    platform = RecordingPlatform()
    gw = await started_gateway(config, [platform])
    try:
        await seed(gw, 10)  # ~2,100 tokens: fits 8K, not the real 1,500
        await platform.say("does it still work?")
        await platform.wait_delivered(1)
        await platform.say("/status")
        await platform.wait_delivered(2)
    finally:
        await close(gw)
    answer, status = platform.texts()[0], platform.texts()[-1]
    assert answer == "echo: does it still work?"
    assert "/ 1,500 tokens" in status
    assert len(summary_calls(fake_openai)) >= 1
    assert fake_openai.calls_to("/chat/completions")[0].json["messages"][-1]["content"] == \
        "does it still work?"


async def test_output_cap_error_lowers_max_tokens_without_compacting(tmp_path, fake_openai):
    fake_openai.max_output_tokens = 200
    config = config_for(tmp_path, fake_openai.base_url, model={"max_output_tokens": 1024})
    platform = RecordingPlatform()
    gw = await started_gateway(config, [platform])
    try:
        await platform.say("hi")
        await platform.wait_delivered(1)
    finally:
        await close(gw)
    assert platform.texts() == ["echo: hi"]
    calls = fake_openai.calls_to("/chat/completions")
    assert calls[0].json["max_tokens"] == 1024
    assert calls[-1].json["max_tokens"] <= 200
    assert summary_calls(fake_openai) == []


async def test_three_failed_overflow_attempts_tell_the_user_what_to_do(tmp_path, fake_openai):
    fake_openai.responder = summarizing_responder
    config = config_for(tmp_path, fake_openai.base_url, model={"context_length": 8192},
                        compression={"protect_last_n": 4})
    platform = RecordingPlatform()
    gw = await started_gateway(config, [platform])
    body = openai_error("This model's maximum context length is 8192 tokens. However, your "
                        "messages resulted in 9000 tokens.", code="context_length_exceeded")
    try:
        await seed(gw, 6)
        for _ in range(12):
            fake_openai.fail_next(400, body=body)
        await platform.say("one more")
        await platform.wait_delivered(1)
    finally:
        await close(gw)
    [advice] = platform.texts()
    assert "/compress" in advice and "/new" in advice
    assert len(chat_calls(fake_openai)) <= 4  # the first try and at most 3 recoveries


async def test_compress_on_a_short_transcript_makes_no_provider_call(tmp_path, fake_openai):
    platform = RecordingPlatform()
    gw = await started_gateway(config_for(tmp_path, fake_openai.base_url), [platform])
    try:
        await platform.say("hello")
        await platform.say("/compress")
        await platform.wait_delivered(2)
    finally:
        await close(gw)
    assert platform.texts()[1].startswith("Nothing to compress yet")
    assert len(fake_openai.calls_to("/chat/completions")) == 1  # only the "hello" turn


async def test_compress_with_focus_in_a_dm(tmp_path, fake_openai):
    fake_openai.responder = summarizing_responder
    config = config_for(tmp_path, fake_openai.base_url, model={"context_length": 8192},
                        compression={"protect_last_n": 4})
    platform = RecordingPlatform()
    gw = await started_gateway(config, [platform])
    try:
        root = await seed(gw, 10)
        await platform.say("/compress the database migration")
        await platform.wait_delivered(1)
        assert len(await continuations_of(gw.store, root)) == 1
    finally:
        await close(gw)
    [reply] = platform.texts()
    assert "Compressed:" in reply and "→" in reply
    assert "Rough estimate: ~" in reply and "tokens" in reply
    [summary] = summary_calls(fake_openai)
    assert "the database migration" in str(summary.json["messages"])


async def test_compress_in_a_group_is_admin_only(tmp_path, fake_openai):
    platform = RecordingPlatform()
    gw = await started_gateway(config_for(tmp_path, fake_openai.base_url), [platform])
    try:
        await platform.say("/compress", is_group=True, addressed_to_bot=True)
        await platform.wait_delivered(1)
    finally:
        await close(gw)
    assert platform.texts() == ["/compress is admin-only here."]


async def test_hygiene_compacts_after_switching_to_a_smaller_window(tmp_path, fake_openai,
                                                                   caplog):
    caplog.set_level(logging.INFO, logger="gateway.conversation")
    fake_openai.responder = summarizing_responder
    roomy = config_for(tmp_path, fake_openai.base_url, model={"context_length": 32_000},
                       compression={"protect_last_n": 4})
    gw = await started_gateway(roomy, [RecordingPlatform()])
    root = await seed(gw, 14)  # ~2,900 tokens: over 85% of 3,000
    await close(gw)
    small = config_for(tmp_path, fake_openai.base_url, model={"context_length": 3000,
                                                              "max_output_tokens": 256},
                       compression={"protect_last_n": 4, "enabled": True})
    platform = RecordingPlatform()
    gw = await started_gateway(small, [platform])
    try:
        await platform.say("continue please")
        await platform.wait_delivered(1)
        assert len(await continuations_of(gw.store, root)) == 1
    finally:
        await close(gw)
    calls = fake_openai.calls_to("/chat/completions")
    assert is_summary_request(calls[0].json), "hygiene compacts before the model turn"
    assert "past 85% of the window" in caplog.text
    assert platform.texts()[0] == "echo: continue please"


async def test_hygiene_does_not_fire_below_85_percent(tmp_path, fake_openai, caplog):
    caplog.set_level(logging.INFO, logger="gateway.conversation")
    config = config_for(tmp_path, fake_openai.base_url, model={"context_length": 32_000})
    platform = RecordingPlatform()
    gw = await started_gateway(config, [platform])
    try:
        root = await seed(gw, 8)
        await platform.say("continue please")
        await platform.wait_delivered(1)
        assert await continuations_of(gw.store, root) == []
    finally:
        await close(gw)
    assert summary_calls(fake_openai) == []
    assert "past 85% of the window" not in caplog.text


async def test_hygiene_never_fires_with_fewer_than_four_messages(tmp_path, fake_openai):
    config = config_for(tmp_path, fake_openai.base_url, model={"context_length": 2048,
                                                               "max_output_tokens": 128})
    platform = RecordingPlatform()
    gw = await started_gateway(config, [platform])
    try:
        session = await gw.conversations.live_session(CHAT)
        await gw.store.append_messages(session.id, [new_message(
            {"role": "assistant", "content": "z" * 6000})])  # system + 1: over 85% alone
        await platform.say("short")
        await platform.wait_delivered(1)
        assert await continuations_of(gw.store, session.id) == []
    finally:
        await close(gw)
    assert summary_calls(fake_openai) == []
