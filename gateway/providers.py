"""Provider settings from config: the main model and the summary model (auxiliary)."""

from __future__ import annotations

from agent.providers.base import ProviderSettings
from gateway.config import Config


def main_settings(config: Config) -> ProviderSettings:
    m = config.model
    return ProviderSettings(
        provider=m.provider, model=m.name, base_url=m.base_url, api_key=m.api_key,
        context_length=m.context_length, max_output_tokens=m.max_output_tokens,
        timeout_s=m.timeout_s, max_retries=m.max_retries,
    )


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
