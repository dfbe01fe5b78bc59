"""Session hygiene: the safety net that compacts a session grown past 85% between turns."""

from __future__ import annotations

from agent.agent import Agent

HYGIENE_RATIO = 0.85  # of the model's window; fixed by design (context spec §2)
MIN_MESSAGES = 4


def hygiene_tokens(agent: Agent) -> int:
    """The session's size: the last API-reported prompt tokens, else the rough estimate."""
    reported = agent.engine.last_prompt_tokens
    if reported:
        return reported
    return agent.engine.raw_request_estimate(agent.messages)


def needs_hygiene(agent: Agent, *, compression_enabled: bool) -> bool:
    if not compression_enabled or len(agent.messages) < MIN_MESSAGES:
        return False
    return hygiene_tokens(agent) >= HYGIENE_RATIO * agent.engine.context_length
