"""The one place where objects are built from config: store, providers, engine, platforms,
conversations and the gateway. Everything else receives what it needs in its constructor."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from agent import caching
from agent.agent import AgentSettings
from agent.attachments.files import AttachmentFiles
from agent.engines import resolve_engine_factory
from agent.providers.base import Provider, ProviderSettings
from agent.providers.breaker import Breakers, BreakerSettings
from agent.providers.chain import FallbackPolicy, ModelChain, SummaryChain
from agent.providers.factory import build_provider
from agent.tools.budget import clean_old_outputs
from gateway.app import Gateway
from gateway.attachments import MB, ReaderSettings
from gateway.auth import Authorizer
from gateway.chat_settings import PerChat
from gateway.commands import CommandTable
from gateway.config import Config, ConfigError
from gateway.config.entries import ModelEntry
from gateway.conversations import Conversations
from gateway.groups import RoomContext, Rooms
from gateway.metrics import MeteredProvider, Metrics
from gateway.pricing import Price
from gateway.resets import Clock, ResetPolicy, utc_now
from gateway.spending import Budgets
from gateway.store_open import build_store
from gateway.streaming import StreamSettings
from platforms.base import PlatformFactory
from platforms.console import ConsoleAdapter
from storage.base import SessionStore

if TYPE_CHECKING:
    from agent.providers.transcribe import Transcriber
    from agent.tools.mcp.connection import ServerSpec
    from gateway.mcp.hub import McpHub
    from platforms.discord.adapter import DiscordSettings
    from platforms.telegram.adapter import TelegramSettings
    from storage.sqlite.opening import Access

log = logging.getLogger(__name__)

def main_settings(config: Config, name: str | None = None) -> ProviderSettings:
    """The configured model; `name`: another model of the same provider (a chat's own,
    `chats: {KEY: {model: NAME}}`), whose vision is then known from its name."""
    return model_settings(config, config.model, name)


def model_settings(config: Config, m: ModelEntry, name: str | None = None
                   ) -> ProviderSettings:
    """A model entry of the config with the prompt-caching rule applied; `name`: another
    model at the same place (see `main_settings`)."""
    model = name or m.name
    return ProviderSettings(
        provider=m.provider, model=model, base_url=m.base_url, api_key=m.api_key,
        context_length=m.context_length, max_output_tokens=m.max_output_tokens,
        timeout_s=m.timeout_s, max_retries=m.max_retries,
        vision=m.vision if model == m.name else None,
        cache_ttl=(config.prompt_caching.cache_ttl if caching.applies(m.provider, model)
                   else None),
    )


def fallback_settings(config: Config) -> list[ProviderSettings]:
    """`model.fallbacks`, in the order they are tried."""
    return [model_settings(config, entry) for entry in config.model.fallbacks]


def summary_settings(config: Config) -> ProviderSettings | None:
    """None when `auxiliary.compression.provider` is auto: the live main model summarizes."""
    aux = config.auxiliary.compression
    if aux.provider == "auto":
        return None
    main = config.model
    same_provider = aux.provider == main.provider
    return ProviderSettings(
        provider=aux.provider,
        model=aux.model or main.name,
        base_url=aux.base_url or (main.base_url if same_provider else None),
        api_key=aux.api_key or (main.api_key if same_provider else None),
        context_length=aux.context_length,
        max_output_tokens=main.max_output_tokens,
        timeout_s=main.timeout_s,
        max_retries=main.max_retries,
    )


def require_local_model(config: Config) -> None:
    """A local model that cannot run in this installation stops `run` and `chat` at once,
    in one line, instead of failing every message."""
    from agent.providers.local import startup_problem

    fallbacks = [(f"model.fallbacks[{i}].provider", settings)
                 for i, settings in enumerate(fallback_settings(config))]
    spare = config.budgets.fallback_model
    if spare is not None and config.budgets.on_limit == "fallback":
        fallbacks.append(("budgets.fallback_model.provider", model_settings(config, spare)))
    for key, settings in (("model.provider", main_settings(config)),
                          ("auxiliary.compression.provider", summary_settings(config)),
                          *fallbacks):
        if settings is not None and settings.provider == "local":
            problem = startup_problem(settings)
            if problem is not None:
                raise ConfigError(f"local: {problem}", source=config.source, key=key)


def agent_settings(config: Config) -> AgentSettings:
    return AgentSettings(
        max_output_tokens=config.model.max_output_tokens,
        threshold=config.compression.threshold,
        target_ratio=config.compression.target_ratio,
        protect_last_n=config.compression.protect_last_n,
        compression_enabled=config.compression.enabled,
        summary_context_length=config.auxiliary.compression.context_length,
    )


def build_prices(config: Config) -> dict[str, Price]:
    """`prices:` from the config, by model, for /usage and the web view."""
    return {model: Price.per_million(p.input, p.output, p.cache_read, p.cache_write)
            for model, p in config.prices.items()}


def build_conversations(config: Config, store: SessionStore,
                        metrics: Metrics | None = None, clock: Clock = utc_now
                        ) -> Conversations:
    """Providers (each call counted in `metrics`; each model followed by `model.fallbacks`,
    their breakers timed by `clock`), the context engine (resolved first: an unknown name
    fails at startup before anything else is said)."""
    engine_factory = resolve_engine_factory(config.context.engine, data_dir=config.data_dir)
    metrics = metrics or Metrics()
    chain = model_chains(config, metrics, clock)
    main = build_provider(main_settings(config))
    aux = summary_settings(config)
    provider = chain(main, "chat", ModelChain)
    # The summarizer gets a meter of its own even when it is the main model, so calls are
    # counted by purpose; as the main model it falls back like a turn does.
    summary_provider = (MeteredProvider(build_provider(aux), metrics, "summary")
                        if aux is not None else chain(main, "summary", SummaryChain))
    prices = build_prices(config)
    chats = PerChat(config.chats)
    providers = {name: chain(build_provider(main_settings(config, name)), "chat", ModelChain)
                 for name in chats.models()}
    files = attachment_files(config, store)
    return Conversations(store, provider=provider, summary_provider=summary_provider,
                         engine_factory=engine_factory, system_prompt=config.system_prompt,
                         settings=agent_settings(config), prices=prices, metrics=metrics,
                         max_agents=config.gateway.cached_agents,
                         tool_dir=tool_outputs(config), files=files,
                         mcp=build_mcp(config, files, metrics),
                         room=RoomContext(store, build_rooms(config, chats)), chats=chats,
                         providers=providers,
                         budgets=build_budgets(config, store, prices, metrics, clock))


def build_budgets(config: Config, store: SessionStore, prices: dict[str, Price],
                  metrics: Metrics, clock: Clock) -> Budgets:
    """Spending limits (docs/budgets.md); spend is counted whether or not any is set."""
    entry = config.budgets.fallback_model
    fallback = (MeteredProvider(build_provider(model_settings(config, entry)), metrics, "chat")
                if entry is not None and config.budgets.on_limit == "fallback" else None)
    return Budgets(config.budgets, store, prices, clock, fallback)


def model_chains(config: Config, metrics: Metrics, clock: Clock
                 ) -> Callable[[Provider, str, type[ModelChain]], ModelChain]:
    """What makes a model and `model.fallbacks` one chain, metered for a purpose; every
    chain shares the fallbacks and one breaker per model (docs/fallbacks.md)."""
    m = config.model
    breakers = Breakers(BreakerSettings(m.breaker.failures, m.breaker.cooldown_s),
                        clock=lambda: clock().timestamp())
    policy = FallbackPolicy(max_wait_s=m.max_wait_s, announce=m.announce_fallback)
    fallbacks = [build_provider(settings) for settings in fallback_settings(config)]
    metrics.watch_counters(
        "threadline_model_calls", "Model calls in the fallback chain, by outcome: ok, failed, "
        "fell_back (failed, so the next model was tried), skipped (its breaker was open)",
        ("model", "outcome"), breakers.outcomes)
    metrics.watch_levels("threadline_model_breaker",
                         "Each model's breaker: 0 closed, 1 open, 2 half-open", "model",
                         breakers.states)

    def chain(head: Provider, purpose: str, kind: type[ModelChain]) -> ModelChain:
        return kind([MeteredProvider(model, metrics, purpose) for model in (head, *fallbacks)],
                    breakers=breakers, policy=policy)

    return chain


def build_rooms(config: Config, chats: PerChat) -> Rooms:
    """What each platform's group settings and each chat's own say: wake words,
    free-response chats, room context (docs/groups.md)."""
    return Rooms({"telegram": config.platforms.telegram, "discord": config.platforms.discord},
                 chats)



def attachment_files(config: Config, store: SessionStore) -> AttachmentFiles:
    """Where attachments are kept (beside the database, and on the store's shelf when
    several processes share it); files unused past the retention period are removed here."""
    retention_s = config.attachments.retention_days * 86_400
    files = AttachmentFiles(config.db_path.parent / "attachments",
                            store.shelf("attachments", retention_s))
    removed = files.sweep(retention_s)
    if removed:
        log.info("removed %d attachment file(s) unused for %g days", removed,
                 config.attachments.retention_days)
    return files


def mcp_servers(config: Config) -> list[ServerSpec]:
    """How to reach each enabled server of `tools.mcp` (docs/mcp.md)."""
    from agent.tools.mcp.connection import ServerSpec

    return [ServerSpec(name, tuple(s.command or ()), dict(s.env), s.cwd, s.url,
                       dict(s.headers), s.timeout_s)
            for name, s in config.tools.mcp.items() if s.enabled]


def build_mcp(config: Config, files: AttachmentFiles | None, metrics: Metrics
              ) -> McpHub | None:
    """The MCP servers, their tools offered where `chats`, `allow` and `deny` say; None
    when none is enabled (the SDK is not even loaded then). Nothing starts here."""
    servers = mcp_servers(config)
    if not servers:
        return None
    from gateway.mcp.access import McpAccess
    from gateway.mcp.hub import McpHub, McpMetrics
    from gateway.mcp.pictures import ToolPictures
    from gateway.offload import WorkerPool

    a = config.attachments
    pool = WorkerPool("mcp-pictures", size=1, memory_mb=a.reader_memory_mb,
                      preload=("agent.attachments.images",))
    return McpHub(servers, McpAccess(config.tools.mcp, Authorizer(config).configured_admin),
                  pictures=ToolPictures(files, pool, a.read_timeout_s) if files else None,
                  metrics=McpMetrics(metrics.registry))


def reader_settings(config: Config) -> ReaderSettings:
    a = config.attachments
    return ReaderSettings(int(a.max_mb * MB), a.max_text_chars, timeout_s=a.read_timeout_s,
                          readers=a.readers, memory_mb=a.reader_memory_mb)


def build_transcriber(config: Config) -> Transcriber | None:
    t = config.transcription
    if not t.model:
        return None
    from agent.providers.transcribe import Transcriber, TranscriptionSettings

    return Transcriber(TranscriptionSettings(model=t.model, base_url=t.base_url,
                                             api_key=t.api_key, timeout_s=t.timeout_s))


def tool_outputs(config: Config) -> Path:
    """Where tool outputs too long for the context are kept; old ones are removed here."""
    root = config.db_path.parent / "tool_outputs"  # beside the database: one state dir
    removed = clean_old_outputs(root)
    if removed:
        log.info("removed %d tool output file(s) past their retention", removed)
    return root


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


def create_gateway(config: Config, platforms: Sequence[PlatformFactory] = (), *,
                   commands: CommandTable | None = None, clock: Clock = utc_now,
                   access: Access = "upgrade") -> Gateway:
    """The gateway; `access`: whether it may upgrade the store's schema (store_open.py)."""
    store = build_store(config, access)
    metrics = Metrics()
    m = config.metrics
    return Gateway(store, build_conversations(config, store, metrics, clock), platforms,
                   auth=Authorizer(config), commands=commands,
                   coalesce_ms=config.gateway.coalesce_ms,
                   lease_seconds=config.gateway.lease_seconds,
                   resets=ResetPolicy.from_config(config.gateway.session_reset), clock=clock,
                   metrics=metrics, metrics_at=(m.listen, m.port) if m.port else None,
                   streaming=StreamSettings(config.streaming.enabled,
                                            config.streaming.min_interval_ms / 1000),
                   attachments=reader_settings(config),
                   transcriber=build_transcriber(config))
