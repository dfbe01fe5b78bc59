"""Session hygiene: the safety net that compacts a session grown past 85% between turns."""

from __future__ import annotations

from agent.agent import Agent
from agent.tokens import over_share

HYGIENE_RATIO = 0.85  # of the model's window; fixed by design (docs/architecture.md)
MIN_MESSAGES = 4


def needs_hygiene(agent: Agent) -> bool:
    """Past 85% of the window by the session's own size, with at least 4 messages."""
    if not agent.compression_enabled or len(agent.messages) < MIN_MESSAGES:
        return False
    return over_share(agent.context_tokens(), agent.window, HYGIENE_RATIO)
