"""What a turn of the agent takes and gives: settings, results, failures, the live reply.

Kept apart from the agent itself so the host (the gateway) can name these without the
loop that produces them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from agent.context_engine import CompressionReport
from agent.errors import AgentError
from agent.feedback import Feedback, build_feedback
from agent.usage import UsageEntry


class ReplyStream(Protocol):
    """Where a streamed answer is shown while it is written (the gateway's live reply).

    `text` gets each new piece of the answer; `retract` says the text so far was not the
    answer after all (the model went on to call tools, or the call failed and is retried),
    so whatever shows it should start over.
    """

    def text(self, piece: str) -> None: ...

    def retract(self) -> None: ...


@dataclass(frozen=True)
class AgentSettings:
    """What an agent and its engine are configured with (from config, by the host)."""

    max_output_tokens: int = 1024
    threshold: float = 0.50
    target_ratio: float = 0.20
    protect_last_n: int = 20
    compression_enabled: bool = True
    summary_context_length: int | None = None


@dataclass(frozen=True)
class Compacted:
    """The transcript a compaction left: the continuation's history, ready to store."""

    messages: tuple[dict[str, Any], ...]
    # How many messages of the session as stored before this turn it was made from.
    covers: int
    # Per message, its position in (stored history + this turn's `before`) when it is a
    # verbatim copy, else None (the summary, a shortened tool call): copies keep metadata.
    sources: tuple[int | None, ...]


@dataclass(frozen=True)
class TurnResult:
    """What a turn produced, already split the way it is stored (one transaction).

    `before` closes the old session (messages written before a compaction that happened
    after them), `compaction` is the continuation's history, `after` goes to the live
    session. Without a compaction everything new is in `after`.
    """

    reply: str
    before: tuple[dict[str, Any], ...] = ()
    compaction: Compacted | None = None
    after: tuple[dict[str, Any], ...] = ()
    usage: tuple[UsageEntry, ...] = ()
    notices: tuple[str, ...] = ()


@dataclass(frozen=True)
class CompactResult:
    """A manual or hygiene compaction outside a model turn."""

    before: tuple[dict[str, Any], ...]
    compaction: Compacted | None  # None: nothing changed
    usage: tuple[UsageEntry, ...] = ()
    notices: tuple[str, ...] = ()
    report: CompressionReport | None = None  # None when the engine was not asked

    @property
    def after(self) -> tuple[dict[str, Any], ...]:
        return self.compaction.messages if self.compaction else self.before

    @property
    def changed(self) -> bool:
        return self.compaction is not None

    def feedback(self) -> Feedback:
        """What /compress tells the user about this compaction."""
        return build_feedback(list(self.before), list(self.after), self.report)


class TurnFailed(AgentError):
    """A turn could not be answered; `user_message` is the one sentence for the user."""

    def __init__(self, user_message: str, *, cause: Exception | None = None,
                 usage: tuple[UsageEntry, ...] = ()) -> None:
        super().__init__(str(cause) if cause else user_message)
        self.user_message = user_message
        self.usage = usage


@dataclass
class ModelLimits:
    """Windows providers revealed to be smaller than we thought, remembered per model."""

    windows: dict[str, int] = field(default_factory=dict)

    def remember(self, model: str, window: int) -> None:
        self.windows[model] = min(window, self.windows.get(model, window))
