"""Telegram end to end in one process: real python-telegram-bot, the fake Bot API, the real
gateway, store and OpenAI client against the fake model."""

from __future__ import annotations

import asyncio
import time

import pytest

from platforms.telegram.format import render
from platforms.text import utf16_len
from tests.harness.media import jpeg
from tests.harness.speakers import unlabelled
from tests.harness.telegram_gateway import telegram_config, telegram_gateway

USER, ADMIN, OWNER = 5550001, 5550002, 5550003
GROUP = -1001234567890


def model_calls(fake_openai) -> int:
    return len(fake_openai.calls_to("/chat/completions"))


async def test_a_private_message_is_answered_and_typing_shows_while_it_runs(
        tmp_path, fake_openai, fake_telegram):
    config = telegram_config(tmp_path, fake_telegram, fake_openai.base_url)
    async with telegram_gateway(config):
        fake_openai.delay_next(4.6)
        started = time.monotonic()
        fake_telegram.push(fake_telegram.updates.private_text("hello there", USER))
        [reply] = await fake_telegram.wait_for_messages(USER, 1, timeout=10)
    assert reply.text == "echo: hello there"
    actions = [a for a in fake_telegram.chat_actions(USER) if a.action == "typing"]
    assert len(actions) >= 2, actions  # shown at once, refreshed about 4 s later
    assert actions[0].at - started < 1.0
    assert 3.0 < actions[1].at - actions[0].at < 5.0


async def test_group_messages_are_answered_only_when_addressed(tmp_path, fake_openai,
                                                               fake_telegram):
    config = telegram_config(tmp_path, fake_telegram, fake_openai.base_url)
    ups = fake_telegram.updates
    async with telegram_gateway(config):
        fake_telegram.push(ups.group_text("just chatting among humans", GROUP, USER))
        fake_telegram.push(ups.group_text("hey @other_helper_bot, you there?", GROUP, USER))
        await asyncio.sleep(0.8)
        assert model_calls(fake_openai) == 0
        fake_telegram.push(ups.group_text("@threadline_bot what is 2+2?", GROUP, USER))
        await fake_telegram.wait_for_messages(GROUP, 1)
        fake_telegram.push(ups.group_text("/help@threadline_bot", GROUP, USER))
        await fake_telegram.wait_for_messages(GROUP, 2)
        fake_telegram.push(ups.group_text("and 3+3?", GROUP, USER, reply_to_bot=True))
        replies = await fake_telegram.wait_for_messages(GROUP, 3)
    assert unlabelled(replies[0].text) == "echo: @threadline_bot what is 2+2?"
    assert replies[0].reply_to is not None  # threaded under the asker's message
    assert "/compress" in replies[1].text
    assert unlabelled(replies[2].text) == "echo: and 3+3?"
    assert model_calls(fake_openai) == 2


async def test_a_forum_topic_is_answered_in_its_topic_with_its_own_session(
        tmp_path, fake_openai, fake_telegram):
    config = telegram_config(tmp_path, fake_telegram, fake_openai.base_url)
    ups = fake_telegram.updates
    async with telegram_gateway(config) as gw:
        fake_telegram.push(ups.group_text("@threadline_bot topic one", GROUP, USER,
                                          thread_id=11, is_forum=True))
        await fake_telegram.wait_for_messages(GROUP, 1)
        fake_telegram.push(ups.group_text("@threadline_bot topic two", GROUP, USER,
                                          thread_id=22, is_forum=True))
        replies = await fake_telegram.wait_for_messages(GROUP, 2)
        sessions = {s.chat_key for s in await gw.store.list_sessions()}
    assert [r.thread_id for r in replies] == [11, 22]
    assert {f"telegram:{GROUP}:11", f"telegram:{GROUP}:22"} <= sessions
    second = fake_openai.calls_to("/chat/completions")[1].json["messages"]
    assert all("topic one" not in str(m.get("content")) for m in second)


async def test_compress_in_a_group_needs_an_admin(tmp_path, fake_openai, fake_telegram):
    config = telegram_config(tmp_path, fake_telegram, fake_openai.base_url,
                             gateway={"admins": {"telegram": [str(ADMIN)]}})
    fake_telegram.admins[GROUP].add(OWNER)  # a chat administrator, known to Telegram only
    ups = fake_telegram.updates
    async with telegram_gateway(config):
        fake_telegram.push(ups.group_text("@threadline_bot remember the plan", GROUP, USER))
        await fake_telegram.wait_for_messages(GROUP, 1)
        fake_telegram.push(ups.group_text("/compress@threadline_bot", GROUP, USER))
        await fake_telegram.wait_for_messages(GROUP, 2)
        fake_telegram.push(ups.group_text("/compress@threadline_bot", GROUP, ADMIN))
        fake_telegram.push(ups.group_text("/compress@threadline_bot", GROUP, OWNER))
        replies = await fake_telegram.wait_for_messages(GROUP, 4)
    assert replies[1].text == "/compress is admin-only here."
    assert all(r.text.startswith("Nothing to compress yet") for r in replies[2:]), replies
    assert model_calls(fake_openai) == 1  # the refusal (and the short chat) asked no model


async def test_a_failed_admin_lookup_counts_as_not_an_admin(tmp_path, fake_openai,
                                                            fake_telegram, caplog):
    config = telegram_config(tmp_path, fake_telegram, fake_openai.base_url)
    fake_telegram.admins[GROUP].add(OWNER)
    fake_telegram.fail_chat_member_next(500)
    async with telegram_gateway(config):
        fake_telegram.push(fake_telegram.updates.group_text("/new@threadline_bot", GROUP, OWNER))
        [refusal] = await fake_telegram.wait_for_messages(GROUP, 1)
        fake_telegram.push(fake_telegram.updates.group_text("/new@threadline_bot", GROUP, OWNER))
        replies = await fake_telegram.wait_for_messages(GROUP, 2)
    assert refusal.text == "/new is admin-only here."
    assert "treating as not an admin" in caplog.text
    assert replies[1].text.startswith("Started a fresh conversation")  # asked again, not cached


async def test_unreadable_content_gets_a_short_answer_and_a_caption_is_read(
        tmp_path, fake_openai, fake_telegram):
    """A text-only model ("fake-model" is not known to see) and no transcription set up."""
    config = telegram_config(tmp_path, fake_telegram, fake_openai.base_url)
    ups = fake_telegram.updates
    async with telegram_gateway(config):
        fake_telegram.push(ups.sticker(chat_id=USER, user_id=USER))
        fake_telegram.push(ups.voice(chat_id=USER, user_id=USER))
        await fake_telegram.wait_for_messages(USER, 2)
        fake_telegram.push(ups.photo(chat_id=USER, user_id=USER, data=jpeg(1)))
        await fake_telegram.wait_for_messages(USER, 3)
        fake_telegram.push(ups.photo("what is in this picture?", chat_id=USER, user_id=USER,
                                     data=jpeg(2)))
        replies = await fake_telegram.wait_for_messages(USER, 5)
    texts = [r.text for r in replies]
    assert {texts[0][:30], texts[1][:30]} == {"I can't open stickers: I read ",
                                              "I can't listen to voice messag"}
    assert texts[2].startswith("This model can't see pictures. Tell me in words")
    assert texts[3].startswith("This model can't see pictures, so I'll go by your words")
    assert texts[4] == ("echo: [a picture was attached here; this model cannot see "
                        "pictures]\nwhat is in this picture?")
    assert model_calls(fake_openai) == 1


async def test_a_long_markdown_reply_arrives_formatted_in_valid_chunks(tmp_path, fake_openai,
                                                                       fake_telegram):
    section = ("## Part {n}\n\nSome **bold words**, a [link](https://example.com/{n}), "
               "`inline code`, emoji 😀🚀 and 中文字符测试。\n\n"
               "```python\n" + "print('line {n}')\n" * 12 + "```\n\n")
    reply = "".join(section.format(n=n) for n in range(40))[:10_000]
    fake_openai.responder = lambda body: reply
    config = telegram_config(tmp_path, fake_telegram, fake_openai.base_url,
                             model={"max_output_tokens": 4000})
    expected = render(reply)
    async with telegram_gateway(config):
        fake_telegram.push(fake_telegram.updates.private_text("write it all", USER))
        sent = await fake_telegram.wait_for_messages(USER, len(expected), timeout=20)
    assert len(expected) >= 3
    assert all(utf16_len(m.text) <= 4096 for m in sent)
    assert "".join(m.text for m in sent) == "".join(c.text for c in expected)
    assert any(e["type"] == "pre" for m in sent for e in m.entities)
    assert any(e["type"] == "text_link" for m in sent for e in m.entities)


async def test_a_chunk_rejected_for_its_formatting_is_resent_as_plain_words(
        tmp_path, fake_openai, fake_telegram):
    reply = "\n\n".join(f"**Point {n}**: " + "words " * 300 for n in range(4))
    fake_openai.responder = lambda body: reply
    config = telegram_config(tmp_path, fake_telegram, fake_openai.base_url,
                             model={"max_output_tokens": 4000})
    expected = render(reply)
    fake_telegram.reject_entities_next(1, method="sendMessage")
    async with telegram_gateway(config):
        fake_telegram.push(fake_telegram.updates.private_text("explain", USER))
        sent = await fake_telegram.wait_for_messages(USER, len(expected), timeout=20)
    assert [m.text for m in sent] == [c.text for c in expected]
    assert sent[0].entities == [] and sent[1].entities  # only the rejected one went plain


PAUSE_S = 5.0


async def test_a_rate_limited_chat_waits_while_other_chats_flow(tmp_path, fake_openai,
                                                                fake_telegram):
    config = telegram_config(tmp_path, fake_telegram, fake_openai.base_url)
    other = USER + 100
    async with telegram_gateway(config):
        # A pause long enough that a busy machine's slowness (seconds) cannot pass for it.
        fake_telegram.rate_limit_next(PAUSE_S)
        fake_telegram.push(fake_telegram.updates.private_text("first", USER))
        # The other chat speaks once the first one's answer met the 429 (not before: its
        # own answer would take the 429 then).
        limited = await fake_telegram.wait_for_call("/sendMessage", timeout=10)
        assert limited.form["chat_id"] == str(USER)
        fake_telegram.push(fake_telegram.updates.private_text("second", other, other))
        [fast] = await fake_telegram.wait_for_messages(other, 1, timeout=10)
        [slow] = await fake_telegram.wait_for_messages(USER, 1, timeout=15)
    # The other chat did not wait for the first one's pause: answered well inside it.
    assert fast.at < slow.at and fast.at - limited.at < PAUSE_S - 1.5, fast.at - limited.at
    assert slow.at - limited.at >= PAUSE_S  # the paused chat's message came after retry_after
    assert slow.text == "echo: first"


async def test_typing_refreshes_never_hold_back_a_send(tmp_path, fake_openai, fake_telegram,
                                                       monkeypatch):
    import gateway.delivery.outbound

    monkeypatch.setattr(gateway.delivery.outbound, "TYPING_REFRESH_S", 0.05)  # 60 refreshes in 3 s
    config = telegram_config(tmp_path, fake_telegram, fake_openai.base_url)
    async with telegram_gateway(config):
        fake_openai.delay_next(3.0)
        fake_telegram.push(fake_telegram.updates.private_text("think hard", USER))
        await fake_openai.wait_for_call("/chat/completions")
        answered_at = time.monotonic() + 3.0
        [reply] = await fake_telegram.wait_for_messages(USER, 1, timeout=10)
    typing = fake_telegram.chat_actions(USER)
    assert len(typing) >= 3  # only as often as the chat's pace allows, not 60 times
    assert reply.at - answered_at < 0.5  # the reply went out as soon as the model answered


async def test_the_same_update_twice_even_across_a_restart_gets_one_reply(
        tmp_path, fake_openai, fake_telegram):
    config = telegram_config(tmp_path, fake_telegram, fake_openai.base_url)
    update = fake_telegram.updates.private_text("only once please", USER)
    async with telegram_gateway(config):
        fake_telegram.push(update)
        fake_telegram.push(update)
        await fake_telegram.wait_for_messages(USER, 1)
        await asyncio.sleep(0.5)
    async with telegram_gateway(config):
        fake_telegram.push(update)
        await asyncio.sleep(1.0)
    assert [m.text for m in fake_telegram.messages(USER)] == ["echo: only once please"]
    assert model_calls(fake_openai) == 1


async def test_a_webhook_answers_telegram_only_once_the_message_is_stored(
        tmp_path, fake_openai, fake_telegram) -> None:
    # Telegram forgets an update it got a 200 for: the 200 must wait for the ledger row, or
    # a crash between the two loses the message (platforms/telegram/webhook.py).
    from tests.harness.fixtures import free_port

    port = free_port()
    config = telegram_config(tmp_path, fake_telegram, fake_openai.base_url, telegram={
        "mode": "webhook", "webhook": {"url": "https://bot.example.com/tg", "port": port,
                                       "listen": "127.0.0.1", "secret_token": "s3cret-token"}})
    group = -100777
    async with telegram_gateway(config) as gateway:
        # A group command asks Telegram whether its sender is an admin before it is stored:
        # a slow answer there holds the message back from the ledger for a while.
        fake_telegram.delay_next(0.5)
        update = fake_telegram.updates.group_text("/usage@threadline_bot", group, USER)
        assert await fake_telegram.post_update(f"http://127.0.0.1:{port}/tg", update,
                                               "s3cret-token") == 200
        message_id = str(update["message"]["message_id"])
        found = await gateway.store.find_inbound("telegram", str(group), message_id)
        assert found is not None and found.text == "/usage@threadline_bot"


@pytest.mark.parametrize("secret, status", [("s3cret-token", 200), ("wrong", 403), (None, 403)])
async def test_a_webhook_takes_only_updates_with_the_secret(tmp_path, fake_openai,
                                                            fake_telegram, secret, status):
    from tests.harness.fixtures import free_port

    port = free_port()
    public = "https://bot.example.com/tg-hook"  # what Telegram calls, through a proxy
    url = f"http://127.0.0.1:{port}/tg-hook"  # where that proxy forwards to
    config = telegram_config(tmp_path, fake_telegram, fake_openai.base_url, telegram={
        "mode": "webhook", "webhook": {"url": public, "listen": "127.0.0.1", "port": port,
                                       "secret_token": "s3cret-token"}})
    async with telegram_gateway(config):
        update = fake_telegram.updates.private_text("via webhook", USER)
        assert await fake_telegram.post_update(url, update, secret) == status
        if status == 200:
            [reply] = await fake_telegram.wait_for_messages(USER, 1)
            assert reply.text == "echo: via webhook"
        else:
            await asyncio.sleep(0.5)
    assert (fake_telegram.webhook.url, fake_telegram.webhook.secret_token) == (
        public, "s3cret-token")
    assert model_calls(fake_openai) == (1 if status == 200 else 0)
