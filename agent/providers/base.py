"""The provider seam: one async call from OpenAI-format messages to a completion."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agent.providers.windows import context_window_for, sees_images
from agent.usage import CanonicalUsage


@dataclass(frozen=True)
class ProviderSettings:
    """Everything needed to build a provider; mirrors the `model` config section."""

    provider: str  # local | openai | anthropic
    model: str
    base_url: str | None = None
    api_key: str | None = None
    context_length: int | None = None
    max_output_tokens: int = 1024
    timeout_s: float = 120.0
    max_retries: int = 2
    model_path: str | None = None  # local provider: explicit GGUF path (tests, operators)
    cache_ttl: str | None = None  # prompt caching breakpoints on chat calls ("5m", "1h")
    vision: bool | None = None  # takes pictures; None: known from the model name


@dataclass(frozen=True)
class Completion:
    """One model answer: an OpenAI-format assistant message plus normalized usage."""

    message: dict[str, Any]  # {"role": "assistant", "content": str | None, "tool_calls"?: [...]}
    usage: CanonicalUsage
    model: str
    finish_reason: str | None = None

    @property
    def text(self) -> str:
        content = self.message.get("content")
        return content if isinstance(content, str) else ""


# Receives the answer's text as it is written, piece by piece (see Provider.complete).
TextSink = Callable[[str], None]


class Provider(ABC):
    """A chat model behind some API. Raises only `agent.errors.ProviderError` kinds."""

    kind: str = "base"
    streams: bool = False  # whether complete() honours `on_text`

    def __init__(self, settings: ProviderSettings) -> None:
        self.settings = settings

    @property
    def model(self) -> str:
        return self.settings.model

    @property
    def context_length(self) -> int:
        """The model's window: config override, else a known table, else a safe default."""
        return self.settings.context_length or context_window_for(self.kind, self.model)

    @property
    def vision(self) -> bool:
        """Whether the model is sent pictures (else it reads a note that one was there)."""
        if self.kind == "local":
            return False
        if self.settings.vision is not None:
            return self.settings.vision
        return sees_images(self.kind, self.model)

    @abstractmethod
    async def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        on_text: TextSink | None = None,
    ) -> Completion:
        """Send OpenAI-format messages (a leading system message allowed) and return the answer.

        With `on_text` (and `streams` true) the answer is streamed: each piece of its text
        goes to `on_text` as it arrives, until the model starts calling a tool; nothing is
        sent for the tool calls themselves. The Completion returned is the same either way,
        usage included.
        """

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release connections or model memory."""


def blank(text: Any) -> bool:
    """Whether a reply's text says nothing: absent, empty or only whitespace. A blank reply
    is the provider's empty answer everywhere (shown, stored and counted as one)."""
    return not (text.strip() if isinstance(text, str) else text)


# Parameters sent as they are, not through the SDK's typed transform: it walks every message
# and tool schema against its TypedDicts, on the event loop, at 1-2 ms a message (a chat of
# 1,000 messages held every other chat up for over a second per turn). `extra_body` is the
# SDK's documented way to add JSON to a request; it replaces the empty placeholders.
RAW_PARAMS = ("messages", "tools", "system")


def unchecked(request: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(typed parameters, parameters to send as they are) of a request."""
    raw = {k: v for k, v in request.items() if k in RAW_PARAMS}
    return {k: v for k, v in request.items() if k not in RAW_PARAMS}, raw
