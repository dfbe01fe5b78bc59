"""Discord around a stop: a slash command still queued when the drain ends is told
privately to send it again (nothing left "thinking…", nothing run twice), and a gateway
connection Discord ends for good stops the process when Discord runs alone."""

from __future__ import annotations

import asyncio

from gateway.config import load_config
from gateway.wiring import create_gateway, platform_factories
from platforms.discord.slash import RESTARTING
from tests.harness.discord_bot import discord_config, discord_gateway, discord_platform
from tests.harness.gateway import write_config

USER = "700000000000000041"


async def test_a_command_queued_at_the_end_of_the_drain_is_told_to_come_again(
        tmp_path, fake_openai, fake_discord):
    dm = fake_discord.dm_channel(USER)
    config = discord_config(tmp_path, fake_discord, fake_openai.base_url)
    async with discord_gateway(config) as gateway:
        fake_openai.delay_next(8)
        await fake_discord.user_message(dm, "a slow question", author_id=USER)
        await fake_openai.wait_for_call("/chat/completions")
        new = await fake_discord.interaction("new", None, dm, user_id=USER)
        deferred = await fake_discord.wait_for_callback(new)
        assert deferred.type == 5  # queued behind the slow turn: "thinking…"
        await gateway.stop(drain_timeout=0.5)
    [told] = fake_discord.followups(new)
    assert told.content == RESTARTING and told.ephemeral
    fake_openai.reset()
    async with discord_gateway(config):  # the cut-short turn is answered; /new is not run
        replies = await fake_discord.wait_for_messages(dm, 2, timeout=15)
        await asyncio.sleep(0.5)
    after = [m.content for m in fake_discord.messages(dm)][len(replies) - 1:]
    assert after == ["echo: a slow question"]
    assert not any("fresh conversation" in m.content for m in fake_discord.messages())


async def test_a_fatal_close_with_discord_alone_gives_up(tmp_path, fake_openai, fake_discord):
    dm = fake_discord.dm_channel(USER)
    config = discord_config(tmp_path, fake_discord, fake_openai.base_url)
    async with discord_gateway(config) as gateway:
        up = gateway.metrics.platform_up.labels("discord")
        assert up._value.get() == 1
        fake_discord.refuse_identify(4014)
        await fake_discord.close_gateway(4014)
        await asyncio.wait_for(gateway.connections.gave_up.wait(), 5)
        assert up._value.get() == 0
        assert "Message Content intent" in gateway.connections.refused["discord"]
        await fake_discord.user_message(dm, "anyone there?", author_id=USER)
        await asyncio.sleep(0.3)
    assert fake_openai.calls_to("/chat/completions") == []


async def test_with_telegram_on_a_refused_discord_is_shown_down_and_telegram_goes_on(
        tmp_path, fake_openai, fake_discord, fake_telegram):
    admin = 5550001
    platforms = discord_platform(fake_discord)
    platforms["telegram"] = {"enabled": True, "token": fake_telegram.token,
                             "base_url": fake_telegram.base_url,
                             "base_file_url": fake_telegram.base_file_url}
    config = load_config(write_config(
        tmp_path, model={"base_url": fake_openai.base_url}, platforms=platforms,
        streaming={"enabled": False}, gateway={"admins": {"telegram": [str(admin)]}}))
    gateway = create_gateway(config, platform_factories(config, console=False))
    async with gateway:
        await gateway.start()
        fake_discord.refuse_identify(4014)
        await fake_discord.close_gateway(4014)
        up = gateway.metrics.platform_up.labels("discord")
        for _ in range(100):
            if up._value.get() == 0:
                break
            await asyncio.sleep(0.05)
        ups = fake_telegram.updates
        fake_telegram.push(ups.private_text("still there?", admin))
        fake_telegram.push(ups.private_text("/status", admin))
        replies = await fake_telegram.wait_for_messages(admin, 2, timeout=15)
        assert not gateway.connections.gave_up.is_set()
        await gateway.stop(drain_timeout=5)
    assert replies[0].text == "echo: still there?"
    assert "Platform discord: down (the Message Content intent is not enabled" in replies[1].text
