"""`threadline run` with Discord, as a real process against the fake Discord."""

from __future__ import annotations

import asyncio
import signal

from tests.harness.cli import THREADLINE, cli_env
from tests.harness.discord_bot import discord_platform
from tests.harness.gateway import write_config

USER = "700000000000000001"


async def test_run_answers_on_discord_and_exits_cleanly_on_sigterm(tmp_path, fake_openai,
                                                                   fake_discord):
    config = write_config(tmp_path, model={"base_url": fake_openai.base_url},
                          platforms=discord_platform(fake_discord))
    dm = fake_discord.dm_channel(USER)
    proc = await asyncio.create_subprocess_exec(
        THREADLINE, "run", "--config", str(config), stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=str(tmp_path),
        env=cli_env(tmp_path))
    try:
        await fake_discord.wait_identified(1, timeout=30)
        await fake_discord.user_message(dm, "hello from discord", author_id=USER)
        [reply] = await fake_discord.wait_for_messages(dm, 1, timeout=30)
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 30)
    err = (await proc.stderr.read()).decode()
    assert reply.content == "echo: hello from discord"
    assert proc.returncode == 0, err
    assert "Traceback" not in err and fake_discord.token not in err
    assert len(fake_discord.command_syncs) == 1
