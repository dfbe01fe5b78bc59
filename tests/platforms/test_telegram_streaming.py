"""Streamed replies on Telegram: real python-telegram-bot against the fake Bot API, the real
OpenAI client against a fake model that streams in small pieces with pauses.

Private chats see drafts (sendMessageDraft) and then one sendMessage; groups see one
message edited as the text arrives. Either way the chat ends with the stored reply, once.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from agent.errors import ProviderUnavailableError
from gateway.delivery.streaming import STOPPED_MARK
from platforms.telegram.format import render
from tests.harness.telegram_gateway import telegram_config, telegram_gateway
from tests.harness.waiting import eventually

USER = 5550001
GROUP = -1001234567890
INTERVAL_S = 0.4
SLACK_S = 0.05  # timestamps are taken by the fake, a little after the bot decided
LONG = " ".join(f"word{i}" for i in range(150))  # ~1,000 characters
MARKDOWN = "**Plan**: " + " ".join(f"step{i}" for i in range(100)) + "\n\n`done`"


def streaming_config(tmp_path, fake_telegram, fake_openai, **kw: Any):
    return telegram_config(tmp_path, fake_telegram, fake_openai.base_url,
                           streaming={"enabled": True, "min_interval_ms": INTERVAL_S * 1000},
                           model={"max_output_tokens": 2000}, **kw)


def slow_stream(fake_openai, reply: str, *, seconds: float) -> None:
    """Every request answers `reply`, streamed 8 characters at a time over `seconds`."""
    fake_openai.responder = lambda body: reply
    fake_openai.stream_chunk_chars = 8
    fake_openai.stream_delay_s = seconds / (len(reply) / 8)


def gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in zip(times, times[1:], strict=False)]


async def stored_messages(gateway, chat_key: str) -> list[dict[str, Any]]:
    session = await gateway.store.live_session(chat_key)
    assert session is not None
    return [m.message for m in await gateway.store.load_history(session.id)]


def group_question(fake_telegram, text: str) -> dict[str, Any]:
    return fake_telegram.updates.group_text(f"@threadline_bot {text}", GROUP, USER)


async def test_a_private_chat_sees_growing_drafts_then_one_message_equal_to_the_stored_reply(
        tmp_path, fake_openai, fake_telegram):
    slow_stream(fake_openai, MARKDOWN, seconds=2.5)
    async with telegram_gateway(streaming_config(tmp_path, fake_telegram, fake_openai)) as gw:
        fake_telegram.push(fake_telegram.updates.private_text("plan it", USER))
        [sent] = await fake_telegram.wait_for_messages(USER, 1, timeout=15)
        stored = await stored_messages(gw, f"telegram:{USER}")
    drafts = fake_telegram.drafts(USER)
    assert len(drafts) >= 3, drafts
    texts = [d.text for d in drafts]
    assert all(len(a) < len(b) for a, b in zip(texts, texts[1:], strict=False))  # growing
    plain = MARKDOWN.replace("**", "").replace("`", "")
    assert all(plain.startswith(t) or MARKDOWN.startswith(t) for t in texts)
    assert min(gaps([d.at for d in drafts])) >= INTERVAL_S - SLACK_S  # one per interval
    assert stored[-1] == {"role": "assistant", "content": MARKDOWN}
    [final] = render(MARKDOWN)
    assert (sent.text, sent.entities) == (final.text, list(final.entities))
    assert [c.method for c in fake_telegram.timeline(USER)
            if c.method != "sendChatAction"][-1] == "sendMessage"
    assert len(fake_telegram.messages(USER)) == 1 and not fake_telegram.edits(USER)


async def test_a_group_sees_one_message_edited_at_most_once_per_interval(
        tmp_path, fake_openai, fake_telegram):
    interval = 1.3  # above Telegram's own pace of a message a second per chat
    slow_stream(fake_openai, MARKDOWN, seconds=4.5)
    config = telegram_config(tmp_path, fake_telegram, fake_openai.base_url,
                             streaming={"enabled": True, "min_interval_ms": interval * 1000},
                             model={"max_output_tokens": 2000})
    async with telegram_gateway(config) as gw:
        fake_telegram.push(group_question(fake_telegram, "plan it"))
        [first] = await fake_telegram.wait_for_messages(GROUP, 1, timeout=15)
        [final] = render(MARKDOWN)
        await eventually(lambda: fake_telegram.messages(GROUP)[0].text == final.text)
        await asyncio.sleep(0.3)  # the reply is marked delivered after the edit
        stored = await stored_messages(gw, f"telegram:{GROUP}")
    [message] = fake_telegram.messages(GROUP)
    assert first.reply_to is not None  # the preview is a reply to the question
    edits = fake_telegram.edits(GROUP)
    assert len(edits) >= 3
    writes = [first.at] + [e.edited_at for e in edits]
    assert min(gaps(writes)) >= interval - SLACK_S
    assert (message.text, message.entities) == (final.text, list(final.entities))
    assert stored[-1]["content"] == MARKDOWN
    assert not fake_telegram.drafts(GROUP)


@pytest.mark.parametrize("method", ["sendMessageDraft", "editMessageText"])
async def test_a_429_while_streaming_pauses_updates_and_the_final_text_arrives_once(
        tmp_path, fake_openai, fake_telegram, method):
    slow_stream(fake_openai, LONG, seconds=3.0)
    chat = USER if method == "sendMessageDraft" else GROUP
    question = (fake_telegram.updates.private_text("go on", USER) if chat == USER
                else group_question(fake_telegram, "go on"))
    async with telegram_gateway(streaming_config(tmp_path, fake_telegram, fake_openai)):
        fake_telegram.rate_limit_next(1.5, method=method)
        fake_telegram.push(question)
        await eventually(lambda: [c for c in fake_telegram.calls if c.path.endswith(method)])
        limited_at = time.monotonic()
        await eventually(lambda: [m.text for m in fake_telegram.messages(chat)][:1] == [LONG],
                         timeout=15, what=lambda: fake_telegram.timeline(chat))
        await asyncio.sleep(0.5)  # room for a duplicate to show up, if there were one
    calls = [c for c in fake_telegram.timeline(chat) if c.method != "sendChatAction"]
    after = [c for c in calls if c.at > limited_at]
    assert after and after[0].at - limited_at >= 1.5 - SLACK_S  # nothing during the pause
    assert [m.text for m in fake_telegram.messages(chat)] == [LONG]  # exactly once


@pytest.mark.parametrize("where", ["private", "group"])
async def test_stop_mid_stream_keeps_the_partial_text_marked_and_the_next_message_is_answered(
        tmp_path, fake_openai, fake_telegram, where):
    replies = iter([LONG])
    slow_stream(fake_openai, LONG, seconds=8.0)
    fake_openai.responder = lambda body: next(replies, "and now a normal answer")
    chat = USER if where == "private" else GROUP

    def say(text: str) -> dict[str, Any]:
        if where == "private":
            return fake_telegram.updates.private_text(text, USER)
        return fake_telegram.updates.group_text(text, GROUP, USER)

    async with telegram_gateway(streaming_config(tmp_path, fake_telegram, fake_openai)) as gw:
        fake_telegram.push(say("@threadline_bot tell me everything"))
        shown = fake_telegram.drafts if where == "private" else fake_telegram.edits
        await eventually(lambda: len(shown(chat)) >= 2)
        fake_telegram.push(say("/stop@threadline_bot"))
        stopped_at = time.monotonic()
        await eventually(lambda: any(STOPPED_MARK in m.text for m in fake_telegram.messages(chat)),
                         timeout=2.0, what=lambda: fake_telegram.timeline(chat))
        [message] = [m for m in fake_telegram.messages(chat) if STOPPED_MARK in m.text]
        partial = message.text.removesuffix(STOPPED_MARK).rstrip()
        assert partial and LONG.startswith(partial) and partial != LONG
        stored = await stored_messages(gw, f"telegram:{chat}")
        assert stored[-1] == {"role": "assistant", "content": f"{partial}\n\n{STOPPED_MARK}"}
        count = len(fake_telegram.messages(chat))
        fake_telegram.push(say("@threadline_bot a short one now"))
        await eventually(lambda: len(fake_telegram.messages(chat)) > count and fake_telegram
                         .messages(chat)[-1].text == "and now a normal answer")
    late = [d for d in fake_telegram.drafts(chat) if d.at > stopped_at + 0.5]
    assert all("normal" in d.text for d in late)  # the stopped stream showed nothing more


@pytest.mark.parametrize("how", ["drop", "error"])
@pytest.mark.parametrize("where", ["private", "group"])
async def test_a_model_dying_mid_stream_leaves_one_clear_sentence_and_no_half_reply(
        tmp_path, fake_openai, fake_telegram, where, how):
    slow_stream(fake_openai, LONG, seconds=3.0)
    fake_openai.break_stream_next(after_chars=400, how=how)
    chat = USER if where == "private" else GROUP
    question = (fake_telegram.updates.private_text("explain", USER) if where == "private"
                else group_question(fake_telegram, "explain"))
    async with telegram_gateway(streaming_config(tmp_path, fake_telegram, fake_openai)) as gw:
        fake_telegram.push(question)
        shown = fake_telegram.drafts if where == "private" else fake_telegram.edits
        await eventually(lambda: fake_telegram.messages(chat) and shown(chat) and not
                         fake_telegram.messages(chat)[-1].text.startswith("word"), timeout=15,
                         what=lambda: fake_telegram.timeline(chat))
        await asyncio.sleep(0.5)
        stored = await stored_messages(gw, f"telegram:{chat}")
    [message] = fake_telegram.messages(chat)  # the partial text did not stay on its own
    if how == "drop":
        assert message.text == ProviderUnavailableError.user_message
    else:
        assert message.text.endswith(".") and "word" not in message.text
    assert stored[-1]["role"] == "user"  # nothing of the half reply was stored
