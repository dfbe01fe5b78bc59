"""Telegram groups as they really are: admin lookups that take time, service messages,
anonymous admins and posts as a channel. The real python-telegram-bot against the fake."""

from __future__ import annotations

import asyncio
import sqlite3
from contextlib import closing

import pytest

from tests.harness.speakers import unlabelled
from tests.harness.telegram_gateway import telegram_config, telegram_gateway
from tests.harness.telegram_service import (
    GROUP_SERVICE_KINDS,
    PRIVATE_SERVICE_KINDS,
    ServiceUpdates,
)

GROUP = -1001234567890
USER, OWNER = 5550001, 5550002
BOT = "@threadline_bot"


def model_calls(fake) -> int:
    return len(fake.calls_to("/chat/completions"))


def session_of_message(db, text: str) -> str:
    with closing(sqlite3.connect(db)) as conn:
        [(session,)] = conn.execute(  # the text after its sender's label
            "SELECT session_id FROM messages WHERE role = 'user' AND content LIKE '%]: ' || ?",
            (text,))
    return session


async def test_new_then_a_question_is_answered_in_the_new_session_despite_a_slow_lookup(
        tmp_path, fake_openai, fake_telegram):
    config = telegram_config(tmp_path, fake_telegram, fake_openai.base_url)
    fake_telegram.admins[GROUP].add(OWNER)
    ups = fake_telegram.updates
    async with telegram_gateway(config):
        fake_telegram.push(ups.group_text(f"{BOT} remember the old plan", GROUP, OWNER))
        await fake_telegram.wait_for_messages(GROUP, 1, timeout=15)
        fake_telegram.slow_method_next("getChatMember", 1.0)  # Telegram is slow to say
        fake_telegram.push(ups.group_text(f"/new{BOT}", GROUP, OWNER))
        fake_telegram.push(ups.group_text(f"{BOT} what is the plan?", GROUP, OWNER))
        replies = await fake_telegram.wait_for_messages(GROUP, 3, timeout=15)
    assert replies[1].text.startswith("Started a fresh conversation"), replies
    assert unlabelled(replies[2].text) == f"echo: {BOT} what is the plan?"
    db = tmp_path / "threadline.db"
    assert session_of_message(db, f"{BOT} what is the plan?") != \
        session_of_message(db, f"{BOT} remember the old plan")


@pytest.mark.timeout(300)  # a group gets 20 messages a minute from a bot
async def test_fifty_mixed_commands_and_messages_are_answered_in_order(
        tmp_path, fake_openai, fake_telegram):
    config = telegram_config(tmp_path, fake_telegram, fake_openai.base_url,
                             streaming={"enabled": False})
    fake_telegram.admins[GROUP].add(OWNER)
    ups = fake_telegram.updates
    commands: list[int] = []
    async with telegram_gateway(config):
        for n in range(50):
            if n % 5 == 2:
                text = f"/usage{BOT}"  # needs the admin lookup
            elif n % 5 == 4:
                text = f"/help{BOT}"
            else:
                text = f"{BOT} message {n}"
            update = ups.group_text(text, GROUP, OWNER)
            if text.startswith("/"):
                commands.append(update["message"]["message_id"])
            fake_telegram.push(update)
        await all_answered(tmp_path / "threadline.db", 50)
        last = update["message"]["message_id"]  # a command: the last answer replies to it
        while not any(r.reply_to == last for r in fake_telegram.messages(GROUP)):
            count = len(fake_telegram.messages(GROUP))
            await fake_telegram.wait_for_messages(GROUP, count + 1, timeout=60)
        replies = fake_telegram.messages(GROUP)
    targets = [r.reply_to for r in replies]
    # Each answer replies to a later message than the one before it (messages that came
    # while a turn ran are answered together, replying to the last of them)...
    assert targets == sorted(targets) and len(set(targets)) == len(targets), targets
    # ... and every command has an answer of its own, in its place.
    assert set(commands) <= set(targets)
    assert all(r.text.startswith(("echo: ", "Usage in", "Commands")) for r in replies), \
        [r.text[:30] for r in replies]


async def all_answered(db, count: int) -> None:
    while True:  # noqa: ASYNC110 - the store is another file, not an event of ours
        with closing(sqlite3.connect(db)) as conn:
            [(done,)] = conn.execute("SELECT count(*) FROM inbound WHERE status = 'answered'")
        if done >= count:
            return
        await asyncio.sleep(0.2)


@pytest.mark.parametrize("open_chat", [False, True])
async def test_service_messages_cost_nothing_anywhere(tmp_path, fake_openai, fake_telegram,
                                                      open_chat):
    config = telegram_config(tmp_path, fake_telegram, fake_openai.base_url,
                             telegram={"require_mention": not open_chat})
    service = ServiceUpdates(fake_telegram.updates)
    async with telegram_gateway(config):
        for kind in GROUP_SERVICE_KINDS:
            fake_telegram.push(service.service(kind, chat_id=GROUP, user_id=USER))
        for kind in PRIVATE_SERVICE_KINDS:
            fake_telegram.push(service.service(kind, chat_id=USER, user_id=USER))
        # A message after them all is answered, so every one of them was handled by then.
        fake_telegram.push(fake_telegram.updates.private_text("ping", USER))
        [reply] = await fake_telegram.wait_for_messages(USER, 1, timeout=15)
    assert reply.text == "echo: ping"
    assert fake_telegram.messages(GROUP) == []
    assert model_calls(fake_openai) == 1


async def test_an_anonymous_admin_is_an_admin_and_a_channel_post_a_member(
        tmp_path, fake_openai, fake_telegram):
    config = telegram_config(tmp_path, fake_telegram, fake_openai.base_url)
    service = ServiceUpdates(fake_telegram.updates)
    async with telegram_gateway(config):
        fake_telegram.push(service.anonymous_admin(f"{BOT} note the launch date"))
        await fake_telegram.wait_for_messages(GROUP, 1, timeout=15)
        fake_telegram.push(service.anonymous_admin(f"/compress{BOT}"))
        await fake_telegram.wait_for_messages(GROUP, 2, timeout=15)
        fake_telegram.push(service.channel_post(f"{BOT} hello from the channel"))
        await fake_telegram.wait_for_messages(GROUP, 3, timeout=15)
        fake_telegram.push(service.channel_post(f"/compress{BOT}"))
        replies = await fake_telegram.wait_for_messages(GROUP, 4, timeout=15)
    texts = [r.text for r in replies]
    assert unlabelled(texts[0]) == f"echo: {BOT} note the launch date"
    assert texts[1].startswith("Nothing to compress yet")  # allowed: an admin
    assert unlabelled(texts[2]) == f"echo: {BOT} hello from the channel"
    assert texts[3] == "/compress is admin-only here."
    assert not fake_telegram.calls_to("/getChatMember"), "neither needed a lookup"
