"""What the Discord bot answers and how (Discord issue 33): only messages addressed to it,
never Discord's own notices, forwards by their words, nothing for empty-looking or deleted
messages, refusals kept private, slash commands kept registered, interaction tokens kept
out of the logs, and inline Markdown intact across the 2,000-character split."""

from __future__ import annotations

import asyncio

from gateway.service.logs import configure_logging
from tests.harness.discord_bot import discord_config, discord_gateway
from tests.harness.fake_discord import BOT_ID, FakeDiscord
from tests.harness.speakers import unlabelled

USER, ADMIN, STRANGER = "700000000000000001", "700000000000000002", "700000000000000003"
NEWCOMER, OTHER_BOT = "700000000000000004", "900000000000000001"
MANAGE_MESSAGES = 1 << 13
EPHEMERAL = 64
SETTLE_S = 0.8  # long enough for an unwanted answer to show, after the last awaited one
MENTION = f"<@{BOT_ID}>"
TYPED = ("/etc is weird", "/play song", "/help", "/new", "/status", "/usage",
         "/compress everything", "/stop", "/usr/bin/env python", "/shrug")


def model_calls(fake_openai) -> int:
    return len(fake_openai.calls_to("/chat/completions"))


def posts(fake: FakeDiscord, channel: str) -> list[str]:
    return [m.content for m in fake.messages(channel)]


def world(fake: FakeDiscord) -> tuple[str, str]:
    """A guild with a text channel and a thread a user started; USER, a moderator and a
    stranger are members."""
    guild = fake.add_guild()
    channel = fake.add_channel(guild)
    thread = fake.add_thread(channel, owner_id=USER)
    mods = fake.add_role(guild, "mods", MANAGE_MESSAGES)
    fake.add_member(guild, USER)
    fake.add_member(guild, ADMIN, role_ids=(mods,))
    fake.add_member(guild, STRANGER)
    return channel, thread


# --- 1. addressing ----------------------------------------------------------------------------
async def test_typed_slash_words_in_a_guild_are_ignored_unless_the_bot_is_mentioned(
        tmp_path, fake_openai, fake_discord):
    channel, _ = world(fake_discord)
    config = discord_config(tmp_path, fake_discord, fake_openai.base_url)
    async with discord_gateway(config):
        for text in TYPED:  # 30 messages, our own command names among them
            await fake_discord.user_message(channel, text, author_id=USER)
            await fake_discord.user_message(channel, text, author_id=ADMIN)
            await fake_discord.user_message(channel, text, author_id=OTHER_BOT,
                                            author_is_bot=True)
        await fake_discord.user_message(channel, f"{MENTION} /help", author_id=USER,
                                        mentions_bot=True)
        await fake_discord.wait_for_messages(channel, 1, timeout=15)
        await asyncio.sleep(SETTLE_S)
    answers = posts(fake_discord, channel)
    assert len(answers) == 1 and answers[0].startswith("Commands:"), answers
    assert model_calls(fake_openai) == 0


async def guild_notices(fake: FakeDiscord, channel: str, thread: str) -> None:
    """Every kind of notice Discord writes into a guild channel or thread."""
    pinned = await fake.user_message(channel, "pin me", author_id=USER, dispatch=False)
    await fake.pin_notice(pinned, by=ADMIN)
    await fake.join_notice(channel, NEWCOMER)
    await fake.boost_notice(channel, USER)
    await fake.boost_notice(channel, USER, tier=2, count=3)
    await fake.thread_created_notice(thread)
    await fake.rename_notice(thread, "a better name", by=USER)
    await fake.recipient_notice(thread, ADMIN, by=USER)
    await fake.recipient_notice(thread, ADMIN, removed=True, by=USER)
    await fake.automod_notice(channel, USER, "a blocked word")
    await fake.poll_result_notice(channel, "Lunch?", total_votes=3, winner=(1, "Pizza", 2))
    await fake.system_message(channel, 12, content="Announcements #news")  # follow added
    for kind in (14, 22, 36):  # discovery, invite reminder, raid alert
        await fake.system_message(channel, kind)
    await fake.system_message(channel, 27, content="Town hall")  # a stage started


async def test_discord_notices_are_never_answered_in_an_open_channel_or_a_dm(
        tmp_path, fake_openai, fake_discord):
    channel, thread = world(fake_discord)
    dm = fake_discord.dm_channel(USER)
    config = discord_config(tmp_path, fake_discord, fake_openai.base_url,
                            discord={"require_mention": False})
    async with discord_gateway(config):
        await guild_notices(fake_discord, channel, thread)
        in_dm = await fake_discord.user_message(dm, "pin this", author_id=USER,
                                                dispatch=False)
        await fake_discord.pin_notice(in_dm, by=USER)
        await fake_discord.call_notice(dm, by=USER)
        await fake_discord.call_notice(dm, by=USER, ended=True)
        # Sentinels: the bot is listening, and got to everything before them.
        await fake_discord.user_message(channel, "channel sentinel", author_id=USER)
        await fake_discord.user_message(dm, "dm sentinel", author_id=USER)
        await fake_discord.wait_for_messages(channel, 1, timeout=15)
        await fake_discord.wait_for_messages(dm, 1, timeout=15)
        await asyncio.sleep(SETTLE_S)
    assert list(map(unlabelled, posts(fake_discord, channel))) == ["echo: channel sentinel"]
    assert posts(fake_discord, dm) == ["echo: dm sentinel"]
    assert posts(fake_discord, thread) == []
    assert model_calls(fake_openai) == 2  # the sentinels alone


async def test_a_strangers_addressed_command_on_a_closed_bot_gets_no_public_refusal(
        tmp_path, fake_openai, fake_discord):
    channel, _ = world(fake_discord)
    config = discord_config(tmp_path, fake_discord, fake_openai.base_url,
                            gateway={"open": False, "allowed_users": {"discord": [USER]}})
    async with discord_gateway(config):
        await fake_discord.user_message(channel, f"{MENTION} /status", author_id=STRANGER,
                                        mentions_bot=True)
        await fake_discord.user_message(channel, f"{MENTION} /status", author_id=USER,
                                        mentions_bot=True)
        await fake_discord.wait_for_messages(channel, 1, timeout=15)
        await asyncio.sleep(SETTLE_S)
    public = [m for m in fake_discord.messages(channel) if not m.ephemeral]
    assert not any(STRANGER in m.content or "private" in m.content for m in public)
    assert [m.content.startswith("Model:") for m in public] == [True]  # USER's /status
    assert model_calls(fake_openai) == 0


# --- 2. forwards, 3. zero-width text, 4. deleted messages ----------------------------------
async def test_a_forwarded_message_is_answered_from_its_snapshot(tmp_path, fake_openai,
                                                                 fake_discord):
    dm = fake_discord.dm_channel(USER)
    config = discord_config(tmp_path, fake_discord, fake_openai.base_url)
    async with discord_gateway(config):
        await fake_discord.forward_message(dm, content="the forwarded words", author_id=USER)
        [reply] = await fake_discord.wait_for_messages(dm, 1, timeout=15)
    assert "the forwarded words" in reply.content
    [request] = fake_openai.calls_to("/chat/completions")
    prompt = str(request.json["messages"])
    assert "the forwarded words" in prompt and "Forwarded" in prompt


async def test_zero_width_text_gets_a_short_note_in_a_dm_and_nothing_in_a_guild(
        tmp_path, fake_openai, fake_discord):
    channel, _ = world(fake_discord)
    dm = fake_discord.dm_channel(USER)
    config = discord_config(tmp_path, fake_discord, fake_openai.base_url)
    async with discord_gateway(config):
        await fake_discord.user_message(dm, "\u200b\u200d\u2060", author_id=USER)
        await fake_discord.user_message(channel, f"{MENTION} \u200b", author_id=USER,
                                        mentions_bot=True)
        await fake_discord.user_message(channel, f"{MENTION} sentinel", author_id=USER,
                                        mentions_bot=True)
        [note] = await fake_discord.wait_for_messages(dm, 1, timeout=15)
        await fake_discord.wait_for_messages(channel, 1, timeout=15)
        await asyncio.sleep(SETTLE_S)
    assert posts(fake_discord, dm) == [note.content] and 0 < len(note.content) <= 200
    assert not note.content.startswith("echo:")  # said by the gateway, not the model
    assert list(map(unlabelled, posts(fake_discord, channel))) == ["echo: sentinel"]
    assert model_calls(fake_openai) == 1  # the sentinel's


async def until_stored(gateway, chat_id: str, message_id: str) -> None:
    """Wait until the gateway holds the message in its ledger (nothing announces it)."""
    store = gateway.store
    async with asyncio.timeout(10):
        while await store.find_inbound("discord", chat_id, message_id) is None:  # noqa: ASYNC110
            await asyncio.sleep(0.02)  # nothing to wait on but the clock


async def test_a_queued_message_deleted_before_its_turn_is_skipped(tmp_path, fake_openai,
                                                                   fake_discord):
    dm = fake_discord.dm_channel(USER)
    config = discord_config(tmp_path, fake_discord, fake_openai.base_url)
    async with discord_gateway(config) as gateway:
        fake_openai.delay_next(2.0)
        await fake_discord.user_message(dm, "first question", author_id=USER)
        await fake_openai.wait_for_call("/chat/completions", timeout=10)
        second = await fake_discord.user_message(dm, "second thoughts", author_id=USER)
        await until_stored(gateway, dm, second)
        await fake_discord.delete_message(second)
        await fake_discord.wait_for_messages(dm, 1, timeout=15)
        await asyncio.sleep(SETTLE_S)
    assert posts(fake_discord, dm) == ["echo: first question"]
    assert model_calls(fake_openai) == 1


# --- 5. slash commands ----------------------------------------------------------------------
async def test_a_slash_command_the_bot_no_longer_has_is_answered_privately(
        tmp_path, fake_openai, fake_discord):
    dm = fake_discord.dm_channel(USER)
    config = discord_config(tmp_path, fake_discord, fake_openai.base_url)
    async with discord_gateway(config):
        stale = await fake_discord.interaction("summarize", None, dm, user_id=USER)
        callback = await fake_discord.wait_for_callback(stale, timeout=10)
    assert callback.status == 200 and callback.type == 4
    assert callback.data.get("flags", 0) & EPHEMERAL
    assert "not a command of this bot any more" in callback.data["content"]
    assert model_calls(fake_openai) == 0


async def test_a_late_refusal_of_a_deferred_command_is_private(tmp_path, fake_openai,
                                                               fake_discord):
    channel, _ = world(fake_discord)
    config = discord_config(tmp_path, fake_discord, fake_openai.base_url)
    async with discord_gateway(config):
        fake_openai.delay_next(4.0)  # the chat's turn is slow: /compress waits behind it
        await fake_discord.user_message(channel, f"{MENTION} a slow question",
                                        author_id=USER, mentions_bot=True)
        await fake_openai.wait_for_call("/chat/completions", timeout=10)
        compress = await fake_discord.interaction("compress", {"focus": "x"}, channel,
                                                  user_id=USER, permissions=0)
        callback = await fake_discord.wait_for_callback(compress, timeout=10)
        [refusal] = await fake_discord.wait_for_followups(compress, 1, timeout=20)
        await fake_discord.wait_for_messages(channel, 2, timeout=15)  # and the turn's answer
        await asyncio.sleep(SETTLE_S)
    assert callback.type == 5  # deferred: the answer came late
    assert refusal.ephemeral and "admin-only" in refusal.content
    public = [m for m in fake_discord.messages(channel) if not m.ephemeral]
    assert not any("admin-only" in m.content for m in public)
    assert not any("admin-only" in m["content"] for m in fake_discord.stored.values()
                   if m["channel_id"] == channel and not m["flags"] & EPHEMERAL)


async def test_commands_deleted_on_discord_are_registered_again_at_the_next_start(
        tmp_path, fake_openai, fake_discord):
    config = discord_config(tmp_path, fake_discord, fake_openai.base_url)
    async with discord_gateway(config):
        pass
    assert len(fake_discord.command_syncs) == 1
    assert fake_discord.delete_registered_commands()
    async with discord_gateway(config):
        pass
    assert len(fake_discord.command_syncs) == 2
    names = {c["name"] for c in fake_discord.commands.get(None, [])}
    assert {"help", "new", "compress", "status"} <= names
    async with discord_gateway(config):
        pass
    assert len(fake_discord.command_syncs) == 2  # nothing deleted: nothing to sync


# --- 6. interaction tokens stay out of the logs ---------------------------------------------
async def test_a_deferred_slash_command_leaves_no_interaction_token_in_debug_logs(
        tmp_path, fake_openai, fake_discord, capsys, restore_logging):
    dm = fake_discord.dm_channel(USER)
    config = discord_config(tmp_path, fake_discord, fake_openai.base_url,
                            logging={"level": "DEBUG"})
    configure_logging(config)  # as `threadline run` does: one redacting handler on stderr
    async with discord_gateway(config):
        fake_openai.delay_next(2.5)  # /new queues behind this turn, so it is deferred
        await fake_discord.user_message(dm, "a slow question", author_id=USER)
        await fake_openai.wait_for_call("/chat/completions", timeout=10)
        new = await fake_discord.interaction("new", None, dm, user_id=USER)
        callback = await fake_discord.wait_for_callback(new, timeout=10)
        await fake_discord.wait_for_followups(new, 1, timeout=20)
    logged = capsys.readouterr().err
    token = fake_discord.interactions[new].token
    assert callback.type == 5  # the whole exchange: created, deferred, followed up
    assert " DEBUG " in logged  # the debug lines were written
    assert token not in logged
    assert token[:24] not in logged  # not even cut short


# --- 7. inline Markdown across the split ----------------------------------------------------
def straddling(marker: str, word: str) -> str:
    """About 3,000 characters whose `marker`-wrapped span crosses character 2,000."""
    head, i = "", 0
    while len(head) < 1900:
        head += f"plain{i} "
        i += 1
    span = marker + " ".join(f"{word}{j}" for j in range(40)) + marker
    tail = " ".join(f"after{k}" for k in range(110))
    return f"{head}{span} {tail}"


def words(text: str) -> list[str]:
    return text.replace("**", " ").replace("`", " ").split()


async def test_a_long_reply_splits_without_breaking_bold_or_inline_code(
        tmp_path, fake_openai, fake_discord):
    bold, code = straddling("**", "bold"), straddling("`", "code")
    assert bold.index("**") < 2000 < bold.rindex("**") and len(bold) > 2800
    assert code.index("`") < 2000 < code.rindex("`")
    fake_openai.queue_reply(bold, code)
    dm = fake_discord.dm_channel(USER)
    config = discord_config(tmp_path, fake_discord, fake_openai.base_url,
                            model={"max_output_tokens": 4000})
    async with discord_gateway(config):
        await fake_discord.user_message(dm, "say it boldly", author_id=USER)
        await fake_discord.wait_for_messages(dm, 2, timeout=15)
        await asyncio.sleep(0.3)  # a third part, if the split made one
        bold_parts = posts(fake_discord, dm)
        await fake_discord.user_message(dm, "now as code", author_id=USER)
        await fake_discord.wait_for_messages(dm, len(bold_parts) + 2, timeout=15)
        await asyncio.sleep(0.3)
    parts = posts(fake_discord, dm)
    code_parts = parts[len(bold_parts):]
    assert all(len(p) <= 2000 for p in parts)
    assert all(p.count("**") % 2 == 0 for p in bold_parts), bold_parts
    assert all(p.count("`") % 2 == 0 for p in code_parts), code_parts
    assert words(" ".join(bold_parts)) == words(bold)
    assert words(" ".join(code_parts)) == words(code)
