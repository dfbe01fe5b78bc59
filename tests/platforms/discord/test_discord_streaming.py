"""Streamed replies on Discord, end to end: real discord.py against the fake Discord, the
real gateway (LiveReply in "edit" mode) and store, the real OpenAI client streaming from
the fake model.

A reply shows while the model writes it: the first update sends a message (a reply to the
user's), later ones edit it, no more often than `streaming.min_interval_ms`; text past
2,000 characters continues in a new message. When the turn ends the stored reply's chunks
replace the previews. The fake logs every accepted write, each edit as its own entry."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from agent.errors import ProviderUnavailableError
from gateway.delivery.streaming import STOPPED_MARK
from platforms.discord.adapter import DISCORD_LIMIT
from platforms.text import split_message, utf16_len
from tests.harness.base import tool_call_reply
from tests.harness.discord_bot import discord_config, discord_gateway
from tests.harness.fake_discord import BOT_ID, FakeDiscord, SentMessage

USER = "700000000000000001"
INTERVAL_MS = 400
INTERVAL_S = INTERVAL_MS / 1000
SLACK_S = 0.05  # the fake stamps a write when it handles it, the pump when it returns
STREAMING = {"enabled": True, "min_interval_ms": INTERVAL_MS}


def guild_channel(fake: FakeDiscord) -> str:
    guild = fake.add_guild()
    channel = fake.add_channel(guild)
    fake.add_member(guild, USER)
    return channel


def sentence(i: int) -> str:
    return f"Sentence {i} of the answer has plain words and nothing else. "


def paragraphs(total: int) -> str:
    """Plain words in paragraphs, `total` characters long (split points fall at boundaries)."""
    text, i = "", 0
    while len(text) < total:
        text += sentence(i)
        i += 1
        if i % 6 == 0:
            text = text.rstrip() + "\n\n"
    return text[:total - 1].rstrip() + "."


def chunks_of(reply: str) -> list[str]:
    """The stored reply's chunks as the Discord adapter renders them."""
    return [c for c in split_message(reply, DISCORD_LIMIT, measure=utf16_len) if c.strip()]


def bot_messages(fake: FakeDiscord, channel: str) -> list[dict[str, Any]]:
    """The bot's messages in the channel as they stand now (deleted ones are gone), oldest
    first."""
    return sorted((m for m in fake.stored.values()
                   if m["channel_id"] == channel and m["author"]["id"] == BOT_ID),
                  key=lambda m: int(m["id"]))


def writes_to(fake: FakeDiscord, message_id: str) -> list[SentMessage]:
    return [m for m in fake.messages() if m.id == message_id]


def gaps(writes: list[SentMessage]) -> list[float]:
    return [b.at - a.at for a, b in zip(writes, writes[1:], strict=False)]


async def stored_messages(gateway: Any, chat_key: str) -> list[dict[str, Any]]:
    session = await gateway.store.live_session(chat_key)
    assert session is not None
    return [m.message for m in await gateway.store.load_history(session.id)]


def last_assistant(messages: list[dict[str, Any]]) -> str:
    return [m for m in messages if m["role"] == "assistant"][-1]["content"]


async def eventually(done: Callable[[], bool], what: str,
                     timeout: float = 10.0) -> None:  # noqa: ASYNC109
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout}s")
        await asyncio.sleep(0.05)


async def settled(fake: FakeDiscord, channel: str, quiet_s: float = 0.6,
                  timeout: float = 10.0) -> None:  # noqa: ASYNC109
    """Wait until the channel has had no write (nor deletion) for `quiet_s`."""
    deadline = time.monotonic() + timeout
    seen = (-1, -1)
    while time.monotonic() < deadline:
        now = (len(fake.messages(channel)), len(fake.deleted))
        if now == seen:
            return
        seen = now
        await asyncio.sleep(quiet_s)
    raise AssertionError(f"channel {channel} still changing after {timeout}s")


async def ask(fake: FakeDiscord, channel: str, text: str) -> str:
    return await fake.user_message(channel, f"<@{BOT_ID}> {text}", author_id=USER,
                                   mentions_bot=True)


async def test_a_streamed_reply_is_one_message_edited_at_most_once_per_interval(
        tmp_path, fake_openai, fake_discord):
    channel = guild_channel(fake_discord)
    reply = " ".join(f"word{i}" for i in range(60)) + "."  # 410 characters
    fake_openai.responder = lambda body: reply
    # 26 pieces over ~2.65 s: the stream ends between two updates (at ~2.42 s and ~2.83 s),
    # not while one is on its way (see the 429 test below for that case).
    fake_openai.stream_chunk_chars = 16
    fake_openai.stream_delay_s = 0.105
    config = discord_config(tmp_path, fake_discord, fake_openai.base_url, streaming=STREAMING)
    async with discord_gateway(config) as gateway:
        asked = await ask(fake_discord, channel, "tell me a long thing")
        [first] = await fake_discord.wait_for_messages(channel, 1, timeout=10)
        await eventually(lambda: fake_discord.stored[first.id]["content"] == reply,
                         "the whole reply")
        await settled(fake_discord, channel)
        stored = await stored_messages(gateway, f"discord:{channel}")
    [message] = bot_messages(fake_discord, channel)
    writes = fake_discord.messages(channel)
    assert writes == writes_to(fake_discord, message["id"])  # one message, nothing else
    create, *edits = writes
    assert create.via == "channel" and all(e.via == "edit" for e in edits)
    assert create.message_reference is not None
    assert str(create.message_reference["message_id"]) == asked  # a reply to the asker
    assert len(edits) >= 3  # shown while written, not only at the end
    assert create.content != reply  # the first update showed part of it
    assert min(gaps(writes)) >= INTERVAL_S - SLACK_S, gaps(writes)
    assert writes[-1].content == message["content"] == reply
    assert last_assistant(stored) == reply


async def test_a_long_streamed_reply_continues_in_new_messages_and_ends_as_its_chunks(
        tmp_path, fake_openai, fake_discord):
    channel = guild_channel(fake_discord)
    reply = paragraphs(5000)
    expected = chunks_of(reply)
    assert len(expected) == 3 and "".join(expected) == reply
    fake_openai.responder = lambda body: reply
    # 50 pieces over ~2.25 s: the stream ends between two updates (at ~2.02 s and ~2.42 s).
    fake_openai.stream_chunk_chars = 100
    fake_openai.stream_delay_s = 0.045
    config = discord_config(tmp_path, fake_discord, fake_openai.base_url, streaming=STREAMING,
                            model={"max_output_tokens": 4000})
    async with discord_gateway(config) as gateway:
        await ask(fake_discord, channel, "write at length")
        await eventually(lambda: [m["content"] for m in bot_messages(fake_discord, channel)]
                         == expected, "the reply's three chunks")
        await settled(fake_discord, channel)
        stored = await stored_messages(gateway, f"discord:{channel}")
    final = bot_messages(fake_discord, channel)
    assert [m["content"] for m in final] == expected
    assert "".join(m["content"] for m in final) == reply
    assert last_assistant(stored) == reply
    writes = fake_discord.messages(channel)
    assert all(utf16_len(w.content) <= DISCORD_LIMIT for w in writes)
    created = [w.id for w in writes if w.via == "channel"]
    final_ids = [m["id"] for m in final]
    # Every message ever sent is one of the three or was deleted (no preview left over).
    assert set(created) <= set(final_ids) | set(fake_discord.deleted)
    assert not set(final_ids) & set(fake_discord.deleted)
    # The text continued into a new message while it was written: at least two messages
    # were previews, shown and then edited, not sent whole at the end.
    edited = {w.id for w in writes if w.via == "edit"}
    assert len(edited & set(final_ids)) >= 2
    # The interval holds across the messages of one chat while the reply is written, and
    # before the first final edit (chunk 0 into the first message, the last write to it).
    first_final = max(i for i, w in enumerate(writes) if w.id == final_ids[0])
    assert min(gaps(writes[:first_final + 1])) >= INTERVAL_S - SLACK_S, gaps(writes)
    for message_id in final_ids:  # and for each message on its own, to the end
        assert all(g >= INTERVAL_S - SLACK_S for g in gaps(writes_to(fake_discord, message_id)))


async def test_previews_the_final_reply_does_not_need_are_deleted(
        tmp_path, fake_openai, fake_discord):
    """Text written before a tool call is retracted: its two previews make way for a short
    answer, the first edited into it, the second deleted."""
    channel = guild_channel(fake_discord)
    musing = paragraphs(4000)
    answer = "Nothing earlier in this chat matches; here is the short answer."

    def responder(body: dict[str, Any]) -> Any:
        if body["messages"][-1]["role"] == "tool":
            return answer
        return tool_call_reply("history_search", {"query": "earlier"}, content=musing)

    fake_openai.responder = responder
    # 80 pieces over ~2.4 s: past 2,000 characters at ~1.2 s, a second preview by ~2 s.
    fake_openai.stream_chunk_chars = 50
    fake_openai.stream_delay_s = 0.03
    config = discord_config(tmp_path, fake_discord, fake_openai.base_url, streaming=STREAMING,
                            model={"max_output_tokens": 4000})
    async with discord_gateway(config) as gateway:
        await ask(fake_discord, channel, "did we talk about this?")
        await eventually(lambda: [m["content"] for m in bot_messages(fake_discord, channel)]
                         == [answer], "the answer alone")
        await settled(fake_discord, channel)
        stored = await stored_messages(gateway, f"discord:{channel}")
    writes = fake_discord.messages(channel)
    previews = list(dict.fromkeys(w.id for w in writes if w.via == "channel"))
    assert len(previews) == 2 and any(musing[:200] in w.content for w in writes)
    [message] = bot_messages(fake_discord, channel)
    assert message["id"] == previews[0]
    assert fake_discord.deleted == [previews[1]]
    assert last_assistant(stored) == answer


RETRY_AFTER_S = 1.0  # discord.py waits this out itself (it gives up only past 30 s)


async def rate_limited_late(tmp_path, fake_openai, fake_discord
                            ) -> tuple[str, str, list[SentMessage], float, list[dict[str, Any]]]:
    """A reply streamed over ~2.8 s whose next PATCH, once the preview shows 300 of its
    470 characters, gets a 429: the update is held up past the end of the stream.
    Returns the channel, the reply, the writes, when the 429 went out, the transcript."""
    channel = guild_channel(fake_discord)
    reply = " ".join(f"token{i}" for i in range(60)) + "."  # 470 characters
    fake_openai.responder = lambda body: reply
    fake_openai.stream_chunk_chars = 17
    fake_openai.stream_delay_s = 0.1
    config = discord_config(tmp_path, fake_discord, fake_openai.base_url, streaming=STREAMING)
    async with discord_gateway(config) as gateway:
        await ask(fake_discord, channel, "go on")
        [first] = await fake_discord.wait_for_messages(channel, 1, timeout=10)
        await eventually(lambda: len(fake_discord.stored[first.id]["content"]) >= 300,
                         "a preview of 300 characters")
        # Message PATCHes only: a POST to ".../messages" has no "/" after "messages".
        fake_discord.rate_limit_next(f"/channels/{channel}/messages/", RETRY_AFTER_S)
        await eventually(lambda: fake_discord.stored[first.id]["content"] == reply,
                         "the whole reply")
        await settled(fake_discord, channel)
        stored = await stored_messages(gateway, f"discord:{channel}")
    [(path, limited_at)] = fake_discord.rate_limited
    assert path.startswith(f"/api/v10/channels/{channel}/messages/")
    return channel, reply, fake_discord.messages(channel), limited_at, stored


async def test_a_rate_limited_edit_pauses_updates_and_the_reply_arrives_once(
        tmp_path, fake_openai, fake_discord):
    channel, reply, writes, limited_at, stored = await rate_limited_late(
        tmp_path, fake_openai, fake_discord)
    assert [w.via for w in writes].count("channel") == 1  # no duplicate send
    after = [w.at for w in writes if w.at > limited_at]
    assert after, "nothing was written after the rate limit"
    assert min(after) - limited_at >= RETRY_AFTER_S - SLACK_S  # updates paused meanwhile
    [message] = bot_messages(fake_discord, channel)
    assert message["content"] == writes[-1].content == reply  # no stale update came last
    assert [w.content for w in writes].count(reply) == 1  # the final text arrived once
    assert last_assistant(stored) == reply


async def test_the_final_edit_waits_the_interval_after_an_update_held_up_by_a_429(
        tmp_path, fake_openai, fake_discord):
    """The stream ends while an update waits out a 429: the final edit still keeps
    `min_interval_ms` after that update lands."""
    _, reply, writes, limited_at, _ = await rate_limited_late(tmp_path, fake_openai,
                                                              fake_discord)
    held, final = [w for w in writes if w.at > limited_at]
    assert final.content == reply
    assert final.at - held.at >= INTERVAL_S - SLACK_S, (held.at, final.at)


async def test_a_model_that_dies_mid_stream_leaves_one_message_with_the_failure_sentence(
        tmp_path, fake_openai, fake_discord):
    """The connection drops after 3,600 characters: the first preview becomes the failure
    sentence, the second goes, and no reply is stored."""
    channel = guild_channel(fake_discord)
    reply = paragraphs(4000)
    fake_openai.responder = lambda body: reply
    fake_openai.stream_chunk_chars = 40
    # 90 pieces before the break, ~2.7 s: the text passes 2,000 characters at ~1.5 s and
    # continues in a second preview an update or two later.
    fake_openai.stream_delay_s = 0.03
    fake_openai.break_stream_next(3600, how="drop")
    config = discord_config(tmp_path, fake_discord, fake_openai.base_url, streaming=STREAMING,
                            model={"max_output_tokens": 4000})
    async with discord_gateway(config) as gateway:
        await ask(fake_discord, channel, "this will break")
        await eventually(lambda: any(m["content"] == ProviderUnavailableError.user_message
                                     for m in bot_messages(fake_discord, channel)),
                         "the failure sentence")
        await settled(fake_discord, channel)
        stored = await stored_messages(gateway, f"discord:{channel}")
    writes = fake_discord.messages(channel)
    previews = list(dict.fromkeys(w.id for w in writes if w.via == "channel"))
    assert len(previews) == 2  # the partial text had gone past 2,000 characters
    assert any(reply[:200] in w.content for w in writes)  # a preview showed partial text
    [message] = bot_messages(fake_discord, channel)
    assert message["id"] == previews[0]  # the first preview became the sentence
    assert message["content"] == ProviderUnavailableError.user_message
    assert previews[1] in fake_discord.deleted
    assert stored[-1]["role"] == "user" and "this will break" in stored[-1]["content"]


async def test_stop_mid_stream_keeps_the_partial_text_marked_and_stored(
        tmp_path, fake_openai, fake_discord):
    """A typed /stop from the asker: the preview keeps what was written, marked, that
    text is the stored reply, and the next message is answered as usual."""
    channel = guild_channel(fake_discord)
    reply = " ".join(f"slow{i}" for i in range(400)) + "."  # ~28 s at this pace
    fake_openai.responder = lambda body: reply if "slowly" in str(body["messages"][-1]) \
        else "A normal answer."
    fake_openai.stream_chunk_chars = 10
    fake_openai.stream_delay_s = 0.1
    config = discord_config(tmp_path, fake_discord, fake_openai.base_url, streaming=STREAMING)
    async with discord_gateway(config) as gateway:
        await ask(fake_discord, channel, "answer slowly")
        [preview] = await fake_discord.wait_for_messages(channel, 1, timeout=10)
        await fake_discord.wait_for_messages(channel, 3, timeout=10)  # two edits more
        stop = await ask(fake_discord, channel, "/stop")  # a typed command is addressed
        stopped_at = time.monotonic()

        def marked() -> list[SentMessage]:
            return [w for w in fake_discord.messages(channel)
                    if w.id == preview.id and w.content.endswith(STOPPED_MARK)]

        await eventually(lambda: bool(marked()), "[stopped] edit", timeout=5)
        [final_edit] = marked()
        assert final_edit.at - stopped_at < 2.0
        await settled(fake_discord, channel)
        stopped = await stored_messages(gateway, f"discord:{channel}")
        fake_openai.stream_delay_s = 0.0
        await ask(fake_discord, channel, "and now a short one")
        await eventually(lambda: any(m["content"] == "A normal answer."
                                     for m in bot_messages(fake_discord, channel)),
                         "next answer")
        await settled(fake_discord, channel)
        after = await stored_messages(gateway, f"discord:{channel}")
    shown = fake_discord.stored[preview.id]["content"]
    partial = shown.removesuffix(f"\n\n{STOPPED_MARK}")
    assert shown == final_edit.content and partial != shown
    assert partial and reply.startswith(partial) and len(partial) < len(reply)
    assert last_assistant(stopped) == shown  # the chat and the transcript agree
    answers = [w for w in fake_discord.messages(channel)
               if w.via == "channel" and w.message_reference
               and str(w.message_reference.get("message_id")) == stop]
    assert len(answers) == 1 and answers[0].content == "Stopping."
    assert [m["content"] for m in bot_messages(fake_discord, channel)] == [
        shown, "Stopping.", "A normal answer."]
    assert last_assistant(after) == "A normal answer."
    assert after[-2]["role"] == "user" and "short one" in after[-2]["content"]
