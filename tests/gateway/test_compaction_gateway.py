"""Compaction in the live gateway: races, overflow recovery, /compress, hygiene."""

from __future__ import annotations

import asyncio
import logging

import pytest

from gateway.turns.turn_records import new_message
from gateway.wiring import create_gateway
from tests.harness.engines import install_plugin
from tests.harness.fake_openai import FakeOpenAI, openai_error
from tests.harness.gateway import (
    close,
    config_for,
    is_summary_request,
    started_gateway,
    summarizing_responder,
)
from tests.harness.platform import RecordingPlatform

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


@pytest.fixture(params=[0.7, 1.6], ids=["tokenizer-counts-less", "tokenizer-counts-more"])
def token_ratio(request, fake_openai) -> float:
    """Real tokenizers disagree with our chars/4 estimate both ways: run both."""
    fake_openai.token_ratio = request.param
    return request.param


async def test_manual_and_automatic_compaction_racing_make_one_continuation(tmp_path,
                                                                         fake_openai,
                                                                         token_ratio):
    fake_openai.responder = summarizing_responder
    config = config_for(tmp_path, fake_openai.base_url, model={"context_length": 4096},
                        compression={"protect_last_n": 4})
    platform = RecordingPlatform()
    running = await started_gateway(config, [platform])
    operator = create_gateway(config, [])  # `threadline compress` from a shell: own store
    await operator.initialize()
    try:
        root = await seed(running, 14)  # ~2,900 tokens: past the 2,611 preflight threshold
        fake_openai.delay_next(0.3, times=2)  # both summaries are in flight at once
        await asyncio.gather(platform.say("next question", chat_id="1"),
                             operator.conversations.compact(CHAT, None))
        await platform.wait_delivered(1)
        # Both sides really compacted (two summaries); only one continuation survived.
        assert len(summary_calls(fake_openai)) == 2
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


async def test_overflow_recovery_compacts_at_most_three_times_then_advises(tmp_path,
                                                                          fake_openai,
                                                                          monkeypatch):
    # An engine whose every compaction makes progress, so only the attempt limit stops it.
    install_plugin(tmp_path, "drop-oldest", "DropOldest")
    monkeypatch.setenv("THREADLINE_HOME", str(tmp_path))
    config = config_for(tmp_path, fake_openai.base_url, model={"context_length": 8192},
                        context={"engine": "drop-oldest"})
    platform = RecordingPlatform()
    gw = await started_gateway(config, [platform])
    body = openai_error("This model's maximum context length is 8192 tokens. However, your "
                        "messages resulted in 9000 tokens.", code="context_length_exceeded")
    try:
        root = await seed(gw, 6)
        for _ in range(12):
            fake_openai.fail_next(400, body=body)
        await platform.say("one more")
        await platform.wait_delivered(1)
        assert await continuations_of(gw.store, root) == []  # a failed turn stores nothing
    finally:
        await close(gw)
    [advice] = platform.texts()
    assert "/compress" in advice and "/new" in advice
    assert len(chat_calls(fake_openai)) == 4  # the first try and exactly 3 recoveries


@pytest.mark.parametrize("token_ratio, size", [(1.6, 460), (0.7, 700)],
                         ids=["counts-more-post-turn", "counts-less-preflight"])
async def test_a_long_chat_keeps_answering_whatever_the_providers_tokenizer(tmp_path,
                                                                           token_ratio, size):
    fake = FakeOpenAI(responder=summarizing_responder, token_ratio=token_ratio)
    await fake.start()
    config = config_for(tmp_path, fake.base_url, model={"context_length": 8192},
                        compression={"protect_last_n": 4})
    platform = RecordingPlatform()
    gw = await started_gateway(config, [platform])
    try:
        root = await seed(gw, 20, size=size)  # 40 stored messages
        for text in ("first", "second", "third"):
            await platform.say(text)
            await platform.wait_delivered(len(platform.delivered_ids) + 1)
        tip = await gw.store.live_session(CHAT)
        chain = await gw.store.chain(tip.id)
    finally:
        await close(gw)
        await fake.stop()
    replies = [t for t in platform.texts() if t.startswith("echo:")]
    assert replies == ["echo: first", "echo: second", "echo: third"], platform.texts()
    assert chain[0].id == root and len(chain) >= 2
    calibration = tip.engine_state["calibration"]
    assert calibration["samples"] >= 1
    assert calibration["ratio"] == pytest.approx(token_ratio, rel=0.25)


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


async def test_compress_with_focus_in_a_dm(tmp_path, fake_openai, token_ratio):
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
                                                                   caplog, token_ratio):
    caplog.set_level(logging.INFO, logger="gateway.turns.compacting")
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


async def test_hygiene_does_not_fire_below_85_percent(tmp_path, fake_openai, caplog,
                                                     token_ratio):
    caplog.set_level(logging.INFO, logger="gateway.turns.compacting")
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


@pytest.mark.parametrize("stored, compacts", [(1, False), (2, True)],
                         ids=["three-messages", "four-messages"])
async def test_hygiene_needs_at_least_four_messages(tmp_path, fake_openai, monkeypatch,
                                                    stored, compacts):
    # An engine that compacts whatever it is given: only hygiene's own guard can say no.
    install_plugin(tmp_path, "drop-oldest", "DropOldest")
    monkeypatch.setenv("THREADLINE_HOME", str(tmp_path))
    config = config_for(tmp_path, fake_openai.base_url, model={"context_length": 2048,
                                                               "max_output_tokens": 128},
                        context={"engine": "drop-oldest"})
    fake_openai.token_ratio = 0.5  # the provider's count stays under the post-turn trigger
    platform = RecordingPlatform()
    gw = await started_gateway(config, [platform])
    try:
        session = await gw.conversations.live_session(CHAT)
        filler = [{"role": "user", "content": "an earlier question"}][: stored - 1]
        await gw.store.append_messages(session.id, [new_message(m) for m in [
            *filler, {"role": "assistant", "content": "z" * 7400}]])  # over 85% alone
        await platform.say("short")
        await platform.wait_delivered(1)
        continued = await continuations_of(gw.store, session.id)
    finally:
        await close(gw)
    # system + stored + "short": 3 messages never compact, 4 do.
    assert (len(continued) == 1) is compacts
