"""The platforms `threadline run` and `threadline chat` connect, as factories an adapter
is made from once its handler exists. A platform's library loads only when it is enabled."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from gateway.config import Config
from platforms.base import PlatformFactory
from platforms.console import ConsoleAdapter

if TYPE_CHECKING:
    from platforms.discord.adapter import DiscordSettings
    from platforms.telegram.adapter import TelegramSettings


def telegram_settings(config: Config) -> TelegramSettings:
    from platforms.telegram.adapter import TelegramSettings  # PTB loads only when used

    tg = config.platforms.telegram
    assert tg.token is not None  # validated: an enabled Telegram has a token
    return TelegramSettings(
        token=tg.token, mode=tg.mode, base_url=tg.base_url, base_file_url=tg.base_file_url,
        webhook_url=tg.webhook.url, listen=tg.webhook.listen, port=tg.webhook.port,
        secret_token=tg.webhook.secret_token, require_mention=tg.require_mention,
        send_timeout_s=tg.send_timeout_s)


def discord_settings(config: Config) -> DiscordSettings:
    from platforms.discord.adapter import DiscordSettings  # discord.py loads only when used

    dc = config.platforms.discord
    assert dc.token is not None  # validated: an enabled Discord has a token
    return DiscordSettings(token=dc.token, api_base=dc.api_base, gateway_url=dc.gateway_url,
                           require_mention=dc.require_mention,
                           guild_ready_timeout=dc.guild_ready_timeout,
                           catch_up_hours=dc.catch_up_hours,
                           shard_count=dc.shard_count,
                           shard_ids=tuple(dc.shard_ids) if dc.shard_ids is not None else None)


def console_platform(chat_id: str = "local") -> PlatformFactory:
    """This terminal as a platform; alone, it is all `threadline chat` connects."""
    return functools.partial(ConsoleAdapter, chat_id=chat_id)


def platform_factories(config: Config, *, console: bool,
                       console_chat: str = "local") -> list[PlatformFactory]:
    """What `threadline run` connects: the console when asked, every enabled remote one."""
    factories: list[PlatformFactory] = []
    if console:
        factories.append(console_platform(console_chat))
    if config.platforms.telegram.enabled:
        from platforms.telegram.adapter import TelegramAdapter

        factories.append(functools.partial(TelegramAdapter,
                                           settings=telegram_settings(config)))
    if config.platforms.discord.enabled:
        from platforms.discord.adapter import DiscordAdapter

        factories.append(functools.partial(DiscordAdapter, settings=discord_settings(config)))
    return factories
