"""The config read as each part's settings: the models (main, fallbacks, summarizer), the
agent's thresholds, prices, attachment reading and MCP servers. Only translation; nothing
is built or started here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent import caching
from agent.agent import AgentSettings
from agent.providers.base import ProviderSettings
from gateway.config import Config, ConfigError
from gateway.config.entries import ModelEntry
from gateway.turns.attachments import MB, ReaderSettings
from gateway.turns.pricing import Price

if TYPE_CHECKING:
    from agent.tools.mcp.connection import ServerSpec


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


def reader_settings(config: Config) -> ReaderSettings:
    a = config.attachments
    return ReaderSettings(int(a.max_mb * MB), a.max_text_chars, timeout_s=a.read_timeout_s,
                          readers=a.readers, memory_mb=a.reader_memory_mb)


def mcp_servers(config: Config) -> list[ServerSpec]:
    """How to reach each enabled server of `tools.mcp` (docs/mcp.md)."""
    from agent.tools.mcp.connection import ServerSpec

    return [ServerSpec(name, tuple(s.command or ()), dict(s.env), s.cwd, s.url,
                       dict(s.headers), s.timeout_s)
            for name, s in config.tools.mcp.items() if s.enabled]
