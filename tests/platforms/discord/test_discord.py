"""Discord end to end in one process: real discord.py over REST and the gateway websocket
against the fake Discord, the real gateway and store, the real OpenAI client against the
fake model."""

from __future__ import annotations

import asyncio
import time

from tests.harness.chunks import fence_lines, rejoin
from tests.harness.discord_bot import discord_config, discord_gateway
from tests.harness.fake_discord import BOT_ID
from tests.harness.gateway import is_summary_request, summarizing_responder
from tests.harness.speakers import unlabelled

USER, ADMIN, STRANGER = "700000000000000001", "700000000000000002", "700000000000000003"
MANAGE_MESSAGES = 1 << 13
EPHEMERAL = 64


def model_calls(fake_openai) -> int:
    return len(fake_openai.calls_to("/chat/completions"))


def world(fake):
    """A guild with one text channel, a thread the bot started and one a user started."""
    guild = fake.add_guild()
    channel = fake.add_channel(guild)
    bot_thread = fake.add_thread(channel, owner_id=BOT_ID)
    user_thread = fake.add_thread(channel, owner_id=USER)
    mods = fake.add_role(guild, "mods", MANAGE_MESSAGES)
    fake.add_member(guild, USER)
    fake.add_member(guild, ADMIN, role_ids=(mods,))
    return guild, channel, bot_thread, user_thread


async def test_a_dm_is_answered_with_typing_shown_while_the_model_works(
        tmp_path, fake_openai, fake_discord):
    dm = fake_discord.dm_channel(USER)
    config = discord_config(tmp_path, fake_discord, fake_openai.base_url)
    async with discord_gateway(config):
        fake_openai.delay_next(0.5)
        await fake_discord.user_message(dm, "hello there", author_id=USER)
        [reply] = await fake_discord.wait_for_messages(dm, 1, timeout=10)
    assert reply.content == "echo: hello there"
    assert fake_discord.typing_count(dm) >= 1


async def test_guild_messages_are_answered_only_when_addressed(tmp_path, fake_openai,
                                                               fake_discord):
    _, channel, bot_thread, user_thread = world(fake_discord)
    config = discord_config(tmp_path, fake_discord, fake_openai.base_url)
    async with discord_gateway(config):
        await fake_discord.user_message(channel, "just chatting among humans", author_id=USER)
        await fake_discord.user_message(user_thread, "a thread of our own", author_id=USER)
        await fake_discord.user_message(channel, "beep", author_id="900", author_is_bot=True,
                                        mentions_bot=True)
        await asyncio.sleep(0.8)
        assert model_calls(fake_openai) == 0
        await fake_discord.user_message(channel, f"<@{BOT_ID}> what is 2+2?", author_id=USER,
                                        mentions_bot=True)
        [first] = await fake_discord.wait_for_messages(channel, 1)
        await fake_discord.user_message(channel, "and 3+3?", author_id=USER,
                                        reply_to=first.id)
        await fake_discord.wait_for_messages(channel, 2)
        await fake_discord.user_message(bot_thread, "no mention needed here", author_id=USER)
        [in_thread] = await fake_discord.wait_for_messages(bot_thread, 1)
    replies = fake_discord.messages(channel)
    assert [unlabelled(r.content) for r in replies] == ["echo: what is 2+2?", "echo: and 3+3?"]
    assert replies[0].message_reference is not None  # threaded under the asker's message
    assert unlabelled(in_thread.content) == "echo: no mention needed here"
    assert model_calls(fake_openai) == 3


async def test_a_thread_is_a_session_of_its_own(tmp_path, fake_openai, fake_discord):
    guild, channel, bot_thread, _ = world(fake_discord)
    config = discord_config(tmp_path, fake_discord, fake_openai.base_url)
    async with discord_gateway(config) as gateway:
        await fake_discord.user_message(channel, f"<@{BOT_ID}> remember apples",
                                        author_id=USER, mentions_bot=True)
        await fake_discord.wait_for_messages(channel, 1)
        await fake_discord.user_message(bot_thread, "remember pears", author_id=USER)
        await fake_discord.wait_for_messages(bot_thread, 1)
        in_channel = await gateway.store.live_session(f"discord:{channel}")
        in_thread = await gateway.store.live_session(f"discord:{channel}:{bot_thread}")
    assert in_channel is not None and in_thread is not None
    assert in_channel.id != in_thread.id
    last_prompt = fake_openai.calls_to("/chat/completions")[-1].json["messages"]
    assert "pears" in str(last_prompt) and "apples" not in str(last_prompt)


async def test_slash_commands_are_synced_once_and_not_again_on_a_restart(
        tmp_path, fake_openai, fake_discord):
    config = discord_config(tmp_path, fake_discord, fake_openai.base_url)
    async with discord_gateway(config):
        pass
    assert len(fake_discord.command_syncs) == 1
    [synced] = fake_discord.command_syncs
    names = {c["name"] for c in synced}
    assert names == {"help", "new", "compress", "usage", "status", "stop"}
    [compress] = [c for c in synced if c["name"] == "compress"]
    assert [o["name"] for o in compress["options"]] == ["focus"]
    async with discord_gateway(config):
        pass
    assert len(fake_discord.command_syncs) == 1


async def test_compress_from_a_member_without_manage_messages_is_refused_privately(
        tmp_path, fake_openai, fake_discord):
    _, channel, _, _ = world(fake_discord)
    config = discord_config(tmp_path, fake_discord, fake_openai.base_url)
    async with discord_gateway(config):
        interaction = await fake_discord.interaction("compress", {"focus": "x"}, channel,
                                                     user_id=USER, permissions=0)
        callback = await fake_discord.wait_for_callback(interaction, timeout=5)
    assert callback.type == 4  # answered at once, not deferred
    assert callback.data["flags"] & EPHEMERAL
    assert "admin-only" in callback.data["content"]
    assert model_calls(fake_openai) == 0


async def talk(fake, channel: str, n: int) -> None:
    """n addressed exchanges in the channel, each answered before the next."""
    for i in range(n):
        await fake.user_message(channel, f"<@{BOT_ID}> fact {i}: " + "detail " * 60,
                                author_id=USER, mentions_bot=True)
        await fake.wait_for_messages(channel, i + 1, timeout=10)


async def test_compress_from_an_admin_defers_and_follows_up_with_the_focus_honoured(
        tmp_path, fake_openai, fake_discord):
    _, channel, _, _ = world(fake_discord)
    fake_openai.responder = summarizing_responder
    config = discord_config(tmp_path, fake_discord, fake_openai.base_url,
                            model={"context_length": 8192}, compression={"protect_last_n": 4})
    async with discord_gateway(config):
        await talk(fake_discord, channel, 10)
        fake_openai.delay_next(2.0)  # the summary takes a while
        interaction = await fake_discord.interaction(
            "compress", {"focus": "zebra migration"}, channel, user_id=ADMIN,
            permissions=MANAGE_MESSAGES)
        callback = await fake_discord.wait_for_callback(interaction, timeout=5)
        [follow_up] = await fake_discord.wait_for_followups(interaction, 1, timeout=15)
    assert callback.type == 5 and callback.elapsed < 3.0  # deferred in time
    assert not (callback.data or {}).get("flags", 0) & EPHEMERAL
    assert "Compressed:" in follow_up.content
    [summary] = [c for c in fake_openai.calls_to("/chat/completions")
                 if is_summary_request(c.json)]
    assert "zebra migration" in str(summary.json["messages"])


async def test_a_typed_compress_works_like_the_slash_command(tmp_path, fake_openai,
                                                             fake_discord):
    dm = fake_discord.dm_channel(USER)
    config = discord_config(tmp_path, fake_discord, fake_openai.base_url)
    async with discord_gateway(config):
        await fake_discord.user_message(dm, "/compress", author_id=USER)
        [reply] = await fake_discord.wait_for_messages(dm, 1)
    assert "nothing to compress" in reply.content.lower()
    assert model_calls(fake_openai) == 0


async def test_a_long_reply_with_code_arrives_in_balanced_chunks_of_at_most_2000(
        tmp_path, fake_openai, fake_discord):
    code = "```python\n" + "".join(f"print('line {i}')\n" for i in range(150)) + "```\n"
    reply = "Here is the script:\n\n" + code + "\n\n" + "And some prose. " * 60
    assert len(reply) > 5000 - 1500 and len(reply) < 7000
    reply = reply + "x" * max(0, 5000 - len(reply))
    fake_openai.queue_reply(reply)
    dm = fake_discord.dm_channel(USER)
    config = discord_config(tmp_path, fake_discord, fake_openai.base_url,
                            model={"max_output_tokens": 4000})
    async with discord_gateway(config):
        await fake_discord.user_message(dm, "show me the script", author_id=USER)
        await fake_discord.wait_for_messages(dm, 3, timeout=10)
        await asyncio.sleep(0.3)
    chunks = [m.content for m in fake_discord.messages(dm)]
    assert len(chunks) >= 3
    assert all(len(c) <= 2000 for c in chunks)
    assert all(fence_lines(c) % 2 == 0 for c in chunks)
    assert rejoin(chunks) == reply


async def test_a_reply_that_mentions_everyone_and_a_role_pings_nobody(
        tmp_path, fake_openai, fake_discord):
    guild, channel, _, _ = world(fake_discord)
    role = fake_discord.add_role(guild, "everyone-who-matters", 0)
    fake_openai.queue_reply(f"Hey @everyone and @here, and <@&{role}>, look!")
    config = discord_config(tmp_path, fake_discord, fake_openai.base_url)
    async with discord_gateway(config):
        await fake_discord.user_message(channel, f"<@{BOT_ID}> shout", author_id=USER,
                                        mentions_bot=True)
        [reply] = await fake_discord.wait_for_messages(channel, 1)
    assert reply.content == f"Hey @everyone and @here, and <@&{role}>, look!"
    mentions = reply.allowed_mentions
    assert mentions is not None and mentions["parse"] == []
    assert not mentions.get("roles") and not mentions.get("users")


async def test_a_rate_limited_channel_waits_while_another_flows_and_nothing_repeats(
        tmp_path, fake_openai, fake_discord):
    slow, fast = fake_discord.dm_channel(USER), fake_discord.dm_channel(ADMIN)
    config = discord_config(tmp_path, fake_discord, fake_openai.base_url)
    async with discord_gateway(config):
        fake_discord.rate_limit_next(f"/channels/{slow}/messages", 1.0)
        started = time.monotonic()
        await fake_discord.user_message(slow, "first", author_id=USER)
        await fake_discord.wait_for_call(f"/channels/{slow}/messages")
        await fake_discord.user_message(fast, "second", author_id=ADMIN)
        [quick] = await fake_discord.wait_for_messages(fast, 1)
        [late] = await fake_discord.wait_for_messages(slow, 1, timeout=10)
        await asyncio.sleep(0.5)
    assert quick.at < late.at
    assert late.at - started >= 1.0  # the retry_after was honoured
    assert len(fake_discord.messages(slow)) == 1 and len(fake_discord.messages(fast)) == 1


async def test_a_reconnect_and_a_zombie_connection_both_resume_and_replies_arrive_once(
        tmp_path, fake_openai, fake_discord):
    fake_discord.heartbeat_interval_ms = 200
    dm = fake_discord.dm_channel(USER)
    config = discord_config(tmp_path, fake_discord, fake_openai.base_url)
    async with discord_gateway(config, heartbeat_timeout=1.0):
        await fake_discord.reconnect()
        await fake_discord.user_message(dm, "during the reconnect", author_id=USER)
        await fake_discord.wait_resumed(1, timeout=10)
        await fake_discord.wait_for_messages(dm, 1, timeout=10)
        await fake_discord.zombie()
        await fake_discord.user_message(dm, "while the line is silent", author_id=USER)
        await fake_discord.wait_resumed(2, timeout=15)
        await fake_discord.wait_for_messages(dm, 2, timeout=10)
        await asyncio.sleep(0.5)
    assert [m.content for m in fake_discord.messages(dm)] == [
        "echo: during the reconnect", "echo: while the line is silent"]
    assert fake_discord.identifies == 1


async def test_configured_admins_and_moderators_manage_a_channel_and_others_are_refused(
        tmp_path, fake_openai, fake_discord):
    guild, channel, _, _ = world(fake_discord)
    owner = "700000000000000009"
    fake_discord.add_member(guild, owner)
    config = discord_config(tmp_path, fake_discord, fake_openai.base_url,
                            gateway={"admins": {"discord": [owner]}})
    async with discord_gateway(config):
        by_owner = await fake_discord.interaction("usage", None, channel, user_id=owner,
                                                  permissions=0)
        by_member = await fake_discord.interaction("usage", None, channel, user_id=USER,
                                                   permissions=0)
        owner_cb = await fake_discord.wait_for_callback(by_owner)
        member_cb = await fake_discord.wait_for_callback(by_member)
        # Typed commands count when addressed to the bot; a refusal is never said in
        # public, so the plain member hears nothing and the moderator gets the answer.
        await fake_discord.user_message(channel, f"<@{BOT_ID}> /usage", author_id=USER,
                                        mentions_bot=True)
        await fake_discord.user_message(channel, f"<@{BOT_ID}> /usage", author_id=ADMIN,
                                        mentions_bot=True)
        await fake_discord.wait_for_messages(channel, 3)  # and the owner's public answer
    typed = [m for m in fake_discord.messages(channel) if m.via == "channel"]
    assert owner_cb.type == 4 and not owner_cb.data.get("flags", 0) & EPHEMERAL
    assert owner_cb.data["content"].startswith("Usage in this conversation (since the last /new")
    assert member_cb.data["flags"] & EPHEMERAL and "admin-only" in member_cb.data["content"]
    assert [m.content.split("\n")[0] for m in typed] == [
        "Usage in this conversation (since the last /new, compactions included):"]
    assert model_calls(fake_openai) == 0


async def test_a_stranger_to_a_closed_bot_gets_one_private_refusal_then_a_short_note(
        tmp_path, fake_openai, fake_discord):
    dm = fake_discord.dm_channel(STRANGER)
    config = discord_config(tmp_path, fake_discord, fake_openai.base_url,
                            gateway={"open": False})
    async with discord_gateway(config):
        first = await fake_discord.interaction("status", None, dm, user_id=STRANGER)
        second = await fake_discord.interaction("status", None, dm, user_id=STRANGER)
        refusal = await fake_discord.wait_for_callback(first)
        again = await fake_discord.wait_for_callback(second)
    assert refusal.data["flags"] & EPHEMERAL and STRANGER in refusal.data["content"]
    assert again.data["flags"] & EPHEMERAL and again.type == 4  # never left hanging
    assert model_calls(fake_openai) == 0


async def test_slash_stop_cancels_the_running_turn(tmp_path, fake_openai, fake_discord):
    dm = fake_discord.dm_channel(USER)
    config = discord_config(tmp_path, fake_discord, fake_openai.base_url)
    async with discord_gateway(config):
        fake_openai.delay_next(20)
        await fake_discord.user_message(dm, "a slow question", author_id=USER)
        await fake_openai.wait_for_call("/chat/completions")
        stop = await fake_discord.interaction("stop", None, dm, user_id=USER)
        callback = await fake_discord.wait_for_callback(stop)
        await fake_discord.wait_for_messages(dm, 2, timeout=5)
    [notice] = [m for m in fake_discord.messages(dm) if m.via == "channel"]
    assert callback.data["content"] == "Stopping."
    assert notice.content.startswith("Stopped.")


async def test_a_command_still_being_answered_at_shutdown_is_delivered(tmp_path, fake_openai,
                                                                       fake_discord):
    dm = fake_discord.dm_channel(USER)
    config = discord_config(tmp_path, fake_discord, fake_openai.base_url)
    async with discord_gateway(config):
        fake_discord.delay_next(1.0)  # the answer's request is slow ...
        await fake_discord.user_message(dm, "/status", author_id=USER)
        await fake_discord.wait_for_call(f"/channels/{dm}/messages")
    # ... and the gateway stops meanwhile: it waits for the answer before closing.
    [reply] = fake_discord.messages(dm)
    assert reply.content.startswith("Model:")


async def test_a_sharded_process_connects_only_its_own_shards(tmp_path, fake_openai,
                                                              fake_discord):
    # Past 2,500 guilds a bot must shard; each process names its shards (docs/scale-out.md).
    config = discord_config(tmp_path, fake_discord, fake_openai.base_url,
                            discord={"shard_count": 4, "shard_ids": [1, 3]})
    async with discord_gateway(config) as gateway:  # up: a shard's READY was seen
        await fake_discord.wait_identified(2, timeout=30)  # discord.py spaces them 5 s apart
        client = gateway.adapters["discord"].client
        assert client is not None and client.is_ready() and client.shard_ids == [1, 3]
    assert sorted(p.get("shard") for p in fake_discord.identify_payloads) == [[1, 4], [3, 4]]
