"""The `platforms` section: the console, Telegram and Discord."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from gateway.config.base import OptStr, Section, rule_error
from gateway.config.groups import GroupSettings


class ConsoleConfig(Section):
    enabled: bool = True


class TelegramWebhookConfig(Section):
    url: OptStr = None
    listen: str = "127.0.0.1"
    port: int = Field(8443, ge=1, le=65535)
    secret_token: OptStr = Field(None, pattern=r"^[A-Za-z0-9_-]{1,256}$")


class TelegramConfig(GroupSettings):
    enabled: bool = False
    token: OptStr = None
    mode: Literal["polling", "webhook"] = "polling"
    base_url: OptStr = None
    base_file_url: OptStr = None
    webhook: TelegramWebhookConfig = Field(default_factory=TelegramWebhookConfig)
    require_mention: bool = True
    # How long a call waits for the Bot API's answer. A message Telegram took but answered
    # late must not be sent twice; past this, the send's outcome is unknown
    # (docs/architecture.md, "Sending").
    send_timeout_s: float = Field(30.0, gt=0, le=600)

    @model_validator(mode="after")
    def _enabled_needs(self) -> TelegramConfig:
        if not self.enabled:
            return self
        if not self.token:
            raise rule_error(
                "token", "required when telegram is enabled; set token: ${TELEGRAM_BOT_TOKEN}"
            )
        if self.mode == "webhook":
            for key in ("url", "secret_token"):
                if not getattr(self.webhook, key):
                    raise rule_error(f"webhook.{key}", "required when mode is webhook")
        return self


class DiscordConfig(GroupSettings):
    enabled: bool = False
    token: OptStr = None
    api_base: OptStr = None
    gateway_url: OptStr = None
    require_mention: bool = True
    guild_ready_timeout: float = Field(2.0, ge=0)
    # On start, what DMs active this recently said while the bot was away is read and
    # answered (channels with a live session are read whatever their age).
    catch_up_hours: float = Field(24.0, ge=0)
    # Sharding (docs/scale-out.md): the total, and which of them this process runs.
    shard_count: int | None = Field(None, ge=1)
    shard_ids: list[int] | None = None

    @model_validator(mode="after")
    def _enabled_needs(self) -> DiscordConfig:
        if self.enabled and not self.token:
            raise rule_error(
                "token", "required when discord is enabled; set token: ${DISCORD_BOT_TOKEN}"
            )
        if self.shard_ids is not None:
            if self.shard_count is None:
                raise rule_error("shard_ids", "needs shard_count, the total number of shards")
            if not self.shard_ids or any(not 0 <= i < self.shard_count for i in self.shard_ids):
                raise rule_error("shard_ids", f"must be shard numbers from 0 to "
                                 f"{self.shard_count - 1}")
        return self


class PlatformsConfig(Section):
    console: ConsoleConfig = Field(default_factory=ConsoleConfig)
    telegram: TelegramConfig = Field(default_factory=TelegramConfig)
    discord: DiscordConfig = Field(default_factory=DiscordConfig)
