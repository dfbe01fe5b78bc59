"""A real gateway with the real Telegram adapter (python-telegram-bot) against the fake."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from gateway.config import Config, load_config
from gateway.service.app import Gateway
from gateway.wiring import create_gateway, platform_factories
from tests.harness.fake_telegram import FakeTelegram
from tests.harness.gateway import write_config


def telegram_config(tmp_path: Path, fake: FakeTelegram, model_url: str, *,
                    telegram: dict[str, Any] | None = None,
                    model: dict[str, Any] | None = None, **sections: Any) -> Config:
    """Telegram alone (no console), pointed at the fake, answering through `model_url`."""
    platforms = {"console": {"enabled": False},
                 "telegram": {"enabled": True, "token": fake.token, "base_url": fake.base_url,
                              "base_file_url": fake.base_file_url, **(telegram or {})}}
    path = write_config(tmp_path, model={"base_url": model_url, **(model or {})},
                        platforms=platforms,
                        **sections)
    return load_config(path)


@asynccontextmanager
async def telegram_gateway(config: Config) -> AsyncIterator[Gateway]:
    """Started, and always stopped and shut down (PTB's poller included)."""
    gateway = create_gateway(config, platform_factories(config, console=False))
    async with gateway:
        await gateway.start()
        try:
            yield gateway
        finally:
            await gateway.stop(drain_timeout=5)
