"""A real gateway with the real Discord adapter (discord.py) against the fake Discord."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from gateway.config import Config, load_config
from gateway.service.app import Gateway
from gateway.wiring import create_gateway, discord_settings
from platforms.discord.adapter import DiscordAdapter
from tests.harness.fake_discord import FakeDiscord
from tests.harness.gateway import write_config

GUILD_READY_S = 0.05  # discord.py waits this long for guilds before READY counts


def discord_platform(fake: FakeDiscord, **discord: Any) -> dict[str, Any]:
    """The `platforms` section: Discord alone, pointed at the fake."""
    return {"console": {"enabled": False},
            "discord": {"enabled": True, "token": fake.token, "api_base": fake.api_base,
                        "gateway_url": fake.gateway_url, "guild_ready_timeout": GUILD_READY_S,
                        **discord}}


def discord_config(tmp_path: Path, fake: FakeDiscord, model_url: str, *,
                   discord: dict[str, Any] | None = None,
                   model: dict[str, Any] | None = None, **sections: Any) -> Config:
    """Streaming is off unless `streaming=` says otherwise: the fake logs every edit as a
    write of its own, and most tests count writes (tests/platforms/discord/
    test_discord_streaming.py turns it on)."""
    sections.setdefault("streaming", {"enabled": False})
    path = write_config(tmp_path, model={"base_url": model_url, **(model or {})},
                        platforms=discord_platform(fake, **(discord or {})), **sections)
    return load_config(path)


@asynccontextmanager
async def discord_gateway(config: Config, *, heartbeat_timeout: float | None = None
                          ) -> AsyncIterator[Gateway]:
    """Started, and always stopped and shut down (the websocket included).

    `heartbeat_timeout` shortens how long discord.py waits on a silent connection before
    it counts it as dead (a zombie) and resumes; it is not a config option.
    """
    settings = discord_settings(config)
    if heartbeat_timeout is not None:
        settings = dataclasses.replace(settings, heartbeat_timeout=heartbeat_timeout)
    gateway = create_gateway(config, [functools.partial(DiscordAdapter, settings=settings)])
    async with gateway:
        await gateway.start()
        try:
            yield gateway
        finally:
            await gateway.stop(drain_timeout=5)
