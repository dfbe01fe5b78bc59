"""Build the configured provider from its settings."""

from __future__ import annotations

from collections.abc import Callable

from agent.errors import AgentError
from agent.providers.base import Provider, ProviderSettings

PROVIDER_KINDS = ("local", "openai", "anthropic")


class UnknownProviderError(AgentError, ValueError):
    """`model.provider` names no provider we know."""

    user_message = "The configured model provider is unknown. The operator needs to check it."


def _openai(settings: ProviderSettings) -> Provider:
    from agent.providers.openai_compat import OpenAICompatProvider

    return OpenAICompatProvider(settings)


def _anthropic(settings: ProviderSettings) -> Provider:
    from agent.providers.anthropic import AnthropicProvider

    return AnthropicProvider(settings)


def _local(settings: ProviderSettings) -> Provider:
    # Imported lazily so a deployment without the local extra never touches llama_cpp.
    from agent.providers.local import LocalProvider

    return LocalProvider(settings)


_BUILDERS: dict[str, Callable[[ProviderSettings], Provider]] = {
    "openai": _openai,
    "anthropic": _anthropic,
    "local": _local,
}


def build_provider(settings: ProviderSettings) -> Provider:
    """`openai` (any OpenAI-compatible server), `anthropic` or `local`."""
    name = (settings.provider or "").strip().lower()
    builder = _BUILDERS.get(name)
    if builder is None:
        raise UnknownProviderError(
            f"unknown model provider {settings.provider!r}; expected one of "
            f"{', '.join(PROVIDER_KINDS)}")
    return builder(settings)
