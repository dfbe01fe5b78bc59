"""The pluggable context engine: the only way the host talks to compaction.

See docs/architecture.md, "The context engine contract".
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agent.tokens import IMAGE_TOKENS, TokenCache, Transcript, estimate_message, estimate_tools
from agent.usage import CanonicalUsage

if TYPE_CHECKING:
    from agent.providers.base import Provider

UsageSink = Callable[[str, str, CanonicalUsage], None]  # (model, purpose, usage)


@dataclass(frozen=True)
class EngineSettings:
    """What the host hands an engine factory; engines ignore what they do not need."""

    context_length: int
    max_output_tokens: int = 1024
    threshold: float = 0.50
    target_ratio: float = 0.20
    protect_last_n: int = 20
    summary_provider: Provider | None = None  # auxiliary.compression, or the main model (auto)
    main_provider: Provider | None = None  # retried once when a separate summary model fails
    summary_context_length: int | None = None  # None: the summary provider's own window
    usage_sink: UsageSink | None = None  # every summarizer call is reported here
    clock: Callable[[], float] | None = None  # time source for cooldowns (tests)
    image_cost: int = IMAGE_TOKENS  # one picture's estimate with the main provider
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EngineStatus:
    last_prompt_tokens: int
    threshold_tokens: int
    context_length: int
    usage_percent: float  # capped at 100
    compression_count: int
    auto_compression_paused: bool = False  # anti-thrashing stopped automatic compaction
    cooldown_until: float | None = None


@dataclass(frozen=True)
class CompressionReport:
    """What the last `compress` did, for feedback and for telling the user."""

    outcome: str  # compressed | noop | aborted | fallback_used | skipped
    messages_before: int
    messages_after: int
    tokens_before: int
    tokens_after: int
    summary_chunks: int = 0
    focus_topic: str | None = None
    error: str | None = None  # redacted, plain words
    notices: tuple[str, ...] = ()  # sentences the host should pass on to the user

    @property
    def changed(self) -> bool:
        return self.outcome in ("compressed", "fallback_used")


class ContextEngine(ABC):
    """Decides when a transcript must shrink and produces the shrunken transcript."""

    # Public token state the host may read (engines keep these current).
    last_prompt_tokens: int = 0
    threshold_tokens: int = 0
    context_length: int = 0
    compression_count: int = 0
    threshold_percent: float = 0.5
    protect_first_n: int = 3
    protect_last_n: int = 20
    last_report: CompressionReport | None = None

    @property
    @abstractmethod
    def name(self) -> str: ...

    @abstractmethod
    def update_from_response(self, usage: CanonicalUsage) -> None:
        """Record a provider call's usage (prompt tokens drive the trigger)."""

    @abstractmethod
    def should_compress(self, prompt_tokens: int | None = None) -> bool: ...

    @abstractmethod
    async def compress(self, messages: list[dict[str, Any]], current_tokens: int | None = None,
                       focus_topic: str | None = None, *, force: bool = False
                       ) -> list[dict[str, Any]]:
        """Return a new, valid message list; never mutate the input. Sets `last_report`.

        `force` is optional for engines: the host passes it only to an engine whose
        `compress` declares it (True for a manual /compress, which should bypass guards
        such as cooldowns); an engine written to the three-argument form never sees it.
        """

    def new_transcript(self, messages: Sequence[dict[str, Any]] = (), *,
                       system_prompt: str | None = None,
                       tools: list[dict[str, Any]] | None = None) -> Transcript:
        """The live message list the host keeps, with running token totals."""
        settings = getattr(self, "settings", None)
        cost = settings.image_cost if isinstance(settings, EngineSettings) else IMAGE_TOKENS
        return Transcript(TokenCache(image_cost=cost), messages, system_prompt=system_prompt,
                          tools=tools)

    def raw_request_estimate(self, messages: Sequence[dict[str, Any]],
                             tools: list[dict[str, Any]] | None = None) -> int:
        """Our uncalibrated estimate of a request: O(1) on a Transcript."""
        if isinstance(messages, Transcript):
            return messages.raw_estimate()
        return sum(estimate_message(m) for m in messages) + estimate_tools(tools)

    def calibrate(self, estimated_tokens: int, prompt_tokens: int) -> None:  # noqa: B027
        """Compare our raw estimate of a request with the provider's prompt_tokens for it."""

    def should_compress_preflight(self, messages: list[dict[str, Any]],
                                  tools: list[dict[str, Any]] | None = None) -> bool:
        return False

    def has_content_to_compress(self, messages: list[dict[str, Any]]) -> bool:
        return True

    def on_session_start(self, session_id: str, **kwargs: Any) -> None:  # noqa: B027
        """A session (root or continuation) became live."""

    def on_session_end(self, session_id: str, messages: list[dict[str, Any]]) -> None:  # noqa: B027
        """A real boundary: /new, /reset, expiry. Never per turn, never on restart."""

    def on_session_reset(self) -> None:
        self.last_prompt_tokens = 0
        self.compression_count = 0

    def get_tool_schemas(self) -> list[dict[str, Any]]:
        return []

    def handle_tool_call(self, name: str, args: dict[str, Any], **kwargs: Any) -> str:
        return json.dumps({"error": f"unknown tool {name}"})

    def get_status(self) -> EngineStatus:
        window = max(self.context_length, 1)
        return EngineStatus(
            last_prompt_tokens=self.last_prompt_tokens,
            threshold_tokens=self.threshold_tokens,
            context_length=self.context_length,
            usage_percent=min(100.0, 100.0 * self.last_prompt_tokens / window),
            compression_count=self.compression_count,
        )

    def update_model(self, model: str, context_length: int, **kwargs: Any) -> None:
        """Recompute thresholds for a new model or a smaller window a provider revealed."""
        self.context_length = context_length

    def export_state(self) -> dict[str, Any]:
        """JSON-serialisable guard state persisted per session and carried into continuations."""
        return {"compression_count": self.compression_count,
                "last_prompt_tokens": self.last_prompt_tokens}

    def restore_state(self, state: dict[str, Any]) -> None:
        self.compression_count = int(state.get("compression_count", 0))
        self.last_prompt_tokens = int(state.get("last_prompt_tokens", 0))


EngineFactory = Callable[[EngineSettings], ContextEngine]
