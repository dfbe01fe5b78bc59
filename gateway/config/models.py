"""Typed configuration: frozen pydantic models mirroring config.yaml (docs/architecture.md,
"Configuration")."""

from __future__ import annotations

import difflib
import ipaddress
import os
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from gateway.config.base import (
    OptStr,
    Section,
    UserId,
    Zone,
    _none_to_empty,
    _none_to_mapping,
    _upper,
    dollars,
    resolve_path,
    rule_error,
)
from gateway.config.budgets import BudgetsConfig
from gateway.config.chats import ChatSettings, check_chat_keys
from gateway.config.entries import ModelConfig
from gateway.config.platforms import PlatformsConfig
from gateway.config.tools import ToolsConfig
from storage.urls import url_password

DEFAULT_SYSTEM_PROMPT = "You are Threadline, a helpful assistant."
DB_FILENAME = "threadline.db"
PLATFORM_NAMES = ("console", "telegram", "discord")


class CompressionConfig(Section):
    enabled: bool = True
    threshold: float = Field(0.50, ge=0.0, le=1.0)
    target_ratio: float = Field(0.20, ge=0.10, le=0.80)
    protect_last_n: int = Field(20, ge=1)


class ContextConfig(Section):
    engine: str = Field("compressor", min_length=1)


class AuxCompressionConfig(Section):
    provider: Literal["auto", "local", "openai", "anthropic"] = "auto"
    model: OptStr = None
    base_url: OptStr = None
    api_key: OptStr = None
    context_length: int | None = Field(None, gt=0)


class AuxiliaryConfig(Section):
    compression: AuxCompressionConfig = Field(default_factory=AuxCompressionConfig)


class PromptCachingConfig(Section):
    cache_ttl: Literal["5m", "1h"] = "5m"


Usd = dollars("USD per million tokens")


class ModelPrice(Section):
    """One model's prices in USD per million tokens, for /usage's cost estimate."""

    input: Usd
    output: Usd
    # Omitted: input x 0.1 for cache reads and input x 1.25 for cache writes, Anthropic's
    # published ratios (5-minute cache); applied in gateway/turns/pricing.py.
    cache_read: Usd | None = None
    cache_write: Usd | None = None

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        # Said here, not by extra="forbid": the error reporter cannot see inside the mapping
        # of model names, and a typo must not hide behind "output is required".
        for key in data if isinstance(data, dict) else ():
            if key not in cls.model_fields:
                known = list(cls.model_fields)
                close = difflib.get_close_matches(str(key), known, n=1)
                hint = f"did you mean '{close[0]}'?" if close else "known keys: " + ", ".join(known)
                raise ValueError(f"unknown key '{key}' ({hint})")
        return data


class StreamingConfig(Section):
    enabled: bool = True  # show replies while they are written
    min_interval_ms: int = Field(1000, ge=0)  # at most one update per chat this often


class TranscriptionConfig(Section):
    """An OpenAI-compatible /audio/transcriptions endpoint; voice notes need `model` set."""

    base_url: OptStr = None  # None: api.openai.com
    api_key: OptStr = None
    model: OptStr = None  # e.g. whisper-1; None: voice notes are declined
    timeout_s: float = Field(120.0, gt=0)


class AttachmentsConfig(Section):
    max_mb: float = Field(20, gt=0)  # the largest file fetched (Telegram's own limit: 20 MB)
    max_text_chars: int = Field(100_000, ge=1000)  # a document's text given to the model
    retention_days: float = Field(90, ge=0)  # unused files go after this; 0 keeps them
    # Reading a file (decoding a picture, a PDF's text) runs in worker processes of its own
    # with this budget per file; a file over it is declined by name (docs/architecture.md,
    # "Untrusted work").
    read_timeout_s: float = Field(20.0, gt=0)
    readers: int = Field(2, ge=1, le=16)  # worker processes reading files at once
    reader_memory_mb: int = Field(768, ge=128)  # address space each reader process may use


class MetricsConfig(Section):
    listen: str = "127.0.0.1"
    port: int | None = Field(None, ge=0, le=65535)  # a port turns the Prometheus endpoint on


class WebConfig(Section):
    """`threadline web` (docs/web.md): where the read-only view listens, and its token."""

    listen: str = "127.0.0.1"
    port: int | None = Field(None, ge=0, le=65535)  # null: 8480
    token: OptStr = None
    session_hours: float = Field(24, gt=0, le=24 * 366)  # a sign-in lasts this long
    # Proxies whose X-Forwarded-For and X-Forwarded-Proto are believed (addresses or
    # networks, e.g. 127.0.0.1 for a TLS proxy on this machine).
    trusted_proxies: list[str] = []

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        for entry in value:
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError:
                raise ValueError(f"{entry!r} is not an address or network") from None
        return value


class StorageConfig(Section):
    path: Path | None = None
    # PostgreSQL instead of the SQLite file, for several gateway processes on one database
    # (docs/storage.md). The file's directory still holds attachments and tool outputs.
    url: str | None = None

    @field_validator("url", mode="before")
    @classmethod
    def _postgres_only(cls, value: Any) -> Any:
        if value in (None, ""):
            return None
        if not isinstance(value, str) or urlsplit(value).scheme not in ("postgresql",
                                                                         "postgres"):
            raise ValueError("must be a postgresql://user:password@host:port/database URL")
        return value

    @property
    def url_password(self) -> str | None:
        """As written in the URL, read the way every message masks it (a raw `#` or `?`
        in it defeats urlsplit); the log filter also masks its percent-decoded form."""
        return url_password(self.url)

    @field_validator("path", mode="before")
    @classmethod
    def _resolve(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, str | os.PathLike) and str(value):
            return resolve_path(value, info.context)
        return _none_to_empty(value)


class PlatformUsers(Section):
    telegram: list[UserId] = Field(default_factory=list)
    discord: list[UserId] = Field(default_factory=list)


class SessionResetConfig(Section):
    mode: Literal["none", "idle", "daily", "both"] = "none"
    idle_minutes: int = Field(1440, ge=1)
    at_hour: int = Field(4, ge=0, le=23)
    timezone: Zone = "UTC"


class GatewayConfig(Section):
    open: bool = False
    allowed_users: PlatformUsers = Field(default_factory=PlatformUsers)
    admins: PlatformUsers = Field(default_factory=PlatformUsers)
    session_reset: SessionResetConfig = Field(default_factory=SessionResetConfig)
    coalesce_ms: int = Field(1500, ge=0)
    # Chats whose agent (live transcript, token estimates, rendered pieces) stays in memory;
    # the least recently active beyond it are rebuilt from the store when they speak again.
    cached_agents: int = Field(1024, ge=1)
    # Several gateway processes on one PostgreSQL database (docs/scale-out.md): a chat's
    # lease lasts this long unrenewed, so a dead process's chats move on within it.
    lease_seconds: float = Field(30.0, ge=1.0)


class TrajectoriesConfig(Section):
    target_max_tokens: int = Field(15250, gt=0)
    summary_target_tokens: int = Field(750, gt=0)
    max_concurrent_requests: int = Field(50, ge=1)
    per_entry_timeout_s: float = Field(300.0, gt=0)


class LoggingConfig(Section):
    level: Annotated[
        Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], BeforeValidator(_upper)
    ] = "INFO"
    format: Literal["text", "json"] = "text"


class Config(Section):
    """The whole configuration; `Config()` is the built-in default."""

    model: ModelConfig = Field(default_factory=ModelConfig)
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    system_prompt_file: Path | None = None
    compression: CompressionConfig = Field(default_factory=CompressionConfig)
    context: ContextConfig = Field(default_factory=ContextConfig)
    auxiliary: AuxiliaryConfig = Field(default_factory=AuxiliaryConfig)
    prompt_caching: PromptCachingConfig = Field(default_factory=PromptCachingConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    web: WebConfig = Field(default_factory=WebConfig)
    streaming: StreamingConfig = Field(default_factory=StreamingConfig)
    transcription: TranscriptionConfig = Field(default_factory=TranscriptionConfig)
    attachments: AttachmentsConfig = Field(default_factory=AttachmentsConfig)
    storage: StorageConfig = Field(default_factory=StorageConfig)
    prices: Annotated[dict[str, ModelPrice], BeforeValidator(_none_to_mapping)] = Field(
        default_factory=dict)  # by model name, as the provider names it
    gateway: GatewayConfig = Field(default_factory=GatewayConfig)
    platforms: PlatformsConfig = Field(default_factory=PlatformsConfig)
    chats: Annotated[dict[str, ChatSettings], BeforeValidator(_none_to_mapping),
                     AfterValidator(check_chat_keys)] = Field(default_factory=dict)
    budgets: BudgetsConfig = Field(default_factory=BudgetsConfig)
    tools: ToolsConfig = Field(default_factory=ToolsConfig)
    trajectories: TrajectoriesConfig = Field(default_factory=TrajectoriesConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)

    # Set by load_config: where the values came from and the resolved $THREADLINE_HOME.
    _source: Path | None = PrivateAttr(None)
    _home: Path | None = PrivateAttr(None)

    def locate(self, source: Path | None, home: Path) -> Config:
        """Remember where this config came from and the data directory it resolved to."""
        self._source = source
        self._home = home
        return self

    @model_validator(mode="before")
    @classmethod
    def _read_prompt_file(cls, data: Any, info: ValidationInfo) -> Any:
        """Replace system_prompt by the contents of system_prompt_file, read now."""
        if not isinstance(data, dict) or not isinstance(data.get("system_prompt_file"), str):
            return data
        if data.get("system_prompt") is not None:
            raise rule_error(
                "system_prompt_file", "use either system_prompt or system_prompt_file, not both"
            )
        path = resolve_path(data["system_prompt_file"], info.context)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "strerror", None) or "not UTF-8 text"
            raise rule_error(
                "system_prompt_file", f"cannot read {path} ({reason}); fix the path"
            ) from None
        return {**data, "system_prompt_file": path, "system_prompt": text.strip()}

    @property
    def source(self) -> Path | None:
        """The file this configuration was loaded from (None for built-in defaults)."""
        return self._source

    @property
    def data_dir(self) -> Path:
        """$THREADLINE_HOME, else ~/.local/share/threadline."""
        return self._home or default_data_dir(os.environ)

    @property
    def db_path(self) -> Path:
        return self.storage.path or self.data_dir / DB_FILENAME

    def enabled_platforms(self) -> list[str]:
        """Names of the enabled platforms, in the order console, telegram, discord."""
        return [name for name in PLATFORM_NAMES if getattr(self.platforms, name).enabled]

    def secret_values(self) -> list[str]:
        """Every configured secret, for the log redaction filter."""
        candidates = (
            self.model.api_key,
            *(entry.api_key for entry in self.model.fallbacks),
            self.budgets.fallback_model.api_key if self.budgets.fallback_model else None,
            *self.tools.secret_values(),
            self.auxiliary.compression.api_key,
            self.transcription.api_key,
            self.platforms.telegram.token,
            self.platforms.telegram.webhook.secret_token,
            self.platforms.discord.token,
            self.storage.url_password,
            self.web.token,
        )
        return [value for value in candidates if value]


def default_data_dir(env: Any) -> Path:
    home = env.get("THREADLINE_HOME")
    if home:
        return Path(home).expanduser()
    return Path(env.get("HOME") or Path.home()) / ".local" / "share" / "threadline"
