"""Streaming through the whole gateway: usage as the provider reported it for both SDKs, a
tool step that shows nothing, a preview finished after a restart, the console printing as
text comes, and the plain path when streaming is off."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from gateway.wiring import build_store
from storage.models import UsageTotals
from tests.gateway.test_usage import counts_from_anthropic, counts_from_chat, summed
from tests.harness.base import tool_call_reply
from tests.harness.cli import THREADLINE, cli_env
from tests.harness.gateway import write_config
from tests.harness.telegram_gateway import telegram_config, telegram_gateway
from tests.harness.waiting import eventually
from tests.harness.witness import WitnessAnthropic, WitnessOpenAI

USER = 5550001
GROUP = -1001234567890
REPLY = " ".join(f"token{i}" for i in range(120))


def stream_slowly(fake: Any, seconds: float, reply: str = REPLY) -> None:
    fake.responder = lambda body: reply
    fake.stream_chunk_chars = 10
    fake.stream_delay_s = seconds / (len(reply) / 10)


async def chat_usage(config: Any, chat_key: str) -> UsageTotals:
    store = build_store(config)
    await store.initialize()
    try:
        session = await store.live_session(chat_key)
        assert session is not None
        return await store.usage_totals(session.id)
    finally:
        await store.shutdown()


@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
async def test_usage_of_streamed_turns_is_what_the_fake_reported(tmp_path, fake_telegram, sdk):
    fake = WitnessOpenAI() if sdk == "openai" else WitnessAnthropic()
    async with fake:
        if sdk == "openai":
            model = {"base_url": fake.base_url}
        else:
            model = {"provider": "anthropic", "name": "claude-fake", "api_key": "test-key",
                     "base_url": fake.base_url}
        stream_slowly(fake, 0.6)
        config = telegram_config(tmp_path, fake_telegram, fake.base_url, model=model,
                                 streaming={"enabled": True, "min_interval_ms": 200})
        async with telegram_gateway(config):
            for n in range(3):
                fake_telegram.push(fake_telegram.updates.private_text(f"question {n}", USER))
                await fake_telegram.wait_for_messages(USER, n + 1, timeout=15)
        assert fake.streamed_requests == 3 and fake_telegram.drafts(USER)
        counts = counts_from_chat if sdk == "openai" else counts_from_anthropic
        expected = summed([counts(r.usage) for r in fake.reported])
    assert await chat_usage(config, f"telegram:{USER}") == expected


async def test_a_tool_step_shows_nothing_and_the_answer_replaces_its_preamble(
        tmp_path, fake_openai, fake_telegram):
    answer = "The garden gets water on Tuesdays, as you said before. " + " ".join(
        f"detail{i}" for i in range(30))
    fake_openai.queue_reply(tool_call_reply("history_search", {"query": "garden"},
                                            content="Let me look that up in our history."),
                            answer)
    fake_openai.stream_chunk_chars = 6
    fake_openai.stream_delay_s = 0.05
    config = telegram_config(tmp_path, fake_telegram, fake_openai.base_url,
                             streaming={"enabled": True, "min_interval_ms": 300})
    async with telegram_gateway(config):
        fake_telegram.push(fake_telegram.updates.group_text(
            "@threadline_bot when does the garden get water?", GROUP, USER))
        await eventually(lambda: [m.text for m in fake_telegram.messages(GROUP)] == [answer],
                         timeout=15, what=lambda: fake_telegram.timeline(GROUP))
    shown = [fake_telegram.messages(GROUP)[0].text] + [e.text for e in
                                                       fake_telegram.edits(GROUP)]
    # Whatever the preamble showed, once the answer shows it shows alone.
    answering = [t for t in shown if "garden" in t]
    assert len(answering) >= 3 and all(answer.startswith(t) for t in answering), shown
    assert len(fake_telegram.messages(GROUP)) == 1


async def test_a_preview_whose_final_edit_failed_is_edited_after_a_restart(
        tmp_path, fake_openai, fake_telegram):
    reply = "**Done**: the preview becomes this formatted text."
    fake_openai.responder = lambda body: reply
    fake_openai.stream_chunk_chars, fake_openai.stream_delay_s = 6, 0.05  # preview: a part
    config = telegram_config(tmp_path, fake_telegram, fake_openai.base_url,
                             streaming={"enabled": True, "min_interval_ms": 1500})
    async with telegram_gateway(config):
        fake_telegram.push(fake_telegram.updates.group_text("@threadline_bot finish", GROUP,
                                                            USER))
        [preview] = await fake_telegram.wait_for_messages(GROUP, 1, timeout=10)
        # The final edit waits out the interval; the platform is down when it is due.
        fake_telegram.fail_method_next("editMessageText", 502, times=3)
        await eventually(lambda: not fake_telegram.pending_injections, timeout=15)
        await asyncio.sleep(0.2)
    assert fake_telegram.messages(GROUP)[0].text != "Done: the preview becomes this formatted text."
    async with telegram_gateway(config):
        await eventually(lambda: fake_telegram.messages(GROUP)[0].entities, timeout=10)
        await asyncio.sleep(0.5)
    [message] = fake_telegram.messages(GROUP)  # the preview, edited; nothing sent anew
    assert message.message_id == preview.message_id
    assert message.text == "Done: the preview becomes this formatted text."


async def test_streaming_off_sends_whole_replies_without_streaming_requests(
        tmp_path, fake_openai, fake_telegram):
    stream_slowly(fake_openai, 0.5)
    config = telegram_config(tmp_path, fake_telegram, fake_openai.base_url,
                             streaming={"enabled": False})
    async with telegram_gateway(config):
        fake_telegram.push(fake_telegram.updates.private_text("hi", USER))
        fake_telegram.push(fake_telegram.updates.group_text("@threadline_bot hi", GROUP, USER))
        await fake_telegram.wait_for_messages(USER, 1, timeout=10)
        await fake_telegram.wait_for_messages(GROUP, 1, timeout=10)
    assert fake_openai.streamed_requests == 0
    assert not fake_telegram.drafts(USER) and not fake_telegram.edits(GROUP)
    assert [m.text for m in fake_telegram.messages()] == [REPLY, REPLY]


async def test_the_console_prints_the_reply_as_it_comes_and_only_once(tmp_path, fake_openai):
    stream_slowly(fake_openai, 2.0)
    config = write_config(tmp_path, model={"base_url": fake_openai.base_url})
    proc = await asyncio.create_subprocess_exec(
        THREADLINE, "chat", "--config", str(config), stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL, cwd=str(tmp_path),
        env=cli_env(tmp_path))
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b"tell me\n")
    await proc.stdin.drain()
    first = await asyncio.wait_for(proc.stdout.read(40), 20)
    seen_at = time.monotonic()
    proc.stdin.close()
    rest = await asyncio.wait_for(proc.stdout.read(), 20)
    finished_at = time.monotonic()
    await proc.wait()
    assert REPLY.startswith(first.decode())
    assert finished_at - seen_at > 1.0  # the start was on screen long before the end
    assert (first + rest).decode() == REPLY + "\n"  # printed once, nothing repeated


async def test_a_hygiene_notice_follows_a_streamed_reply_in_the_console(tmp_path, fake_openai):
    from tests.harness.gateway import is_summary_request

    # Summaries fail (an empty answer), so hygiene's compaction falls back with a notice.
    fake_openai.responder = lambda body: ("" if is_summary_request(body) else "the answer")

    async def chat(lines: str, window: int) -> list[str]:
        config = write_config(tmp_path, model={"base_url": fake_openai.base_url,
                                               "context_length": window,
                                               "max_output_tokens": 256},
                              compression={"protect_last_n": 4})
        proc = await asyncio.create_subprocess_exec(
            THREADLINE, "chat", "--config", str(config), stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
            cwd=str(tmp_path), env=cli_env(tmp_path))
        out, _ = await asyncio.wait_for(proc.communicate(lines.encode()), 60)
        return out.decode().splitlines()

    filler = "words to fill the window of a model that is about to shrink " * 6
    await chat("".join(f"line {i} {filler}\n" for i in range(30)), 32_000)
    printed = await chat("continue please\n", 3000)  # now the session is past 85%
    assert printed[0] == "the answer", printed  # once, whole, and first
    assert printed.count("the answer") == 1
    assert any("summary model is unavailable" in line for line in printed[1:]), printed
