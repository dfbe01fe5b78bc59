"""Prompt caching for Claude models: the "system_and_3" breakpoints (docs/architecture.md,
"Prompt caching").

A request carries at most four `cache_control` markers: the system prompt and the last
three non-system messages. Anthropic then reads the longest prefix it has cached and
writes the rest up to the last marker, so each turn re-reads everything before the newest
messages. Only the marked messages are copied; the history itself is never touched.
"""

from __future__ import annotations

from typing import Any, Literal

Style = Literal["anthropic", "openai"]
TTLS = ("5m", "1h")
LAST_N = 3  # non-system messages marked, besides the system prompt


def applies(provider: str, model: str) -> bool:
    """Claude models, on Anthropic's API or an OpenAI-compatible router that serves them
    (OpenRouter, LiteLLM: `anthropic/claude-...`)."""
    return provider in ("anthropic", "openai") and "claude" in model.lower()


def marker(ttl: str = "5m") -> dict[str, str]:
    if ttl not in TTLS:
        raise ValueError(f"cache ttl must be one of {', '.join(TTLS)}, not {ttl!r}")
    return {"type": "ephemeral", "ttl": "1h"} if ttl == "1h" else {"type": "ephemeral"}


def mark(messages: list[dict[str, Any]], ttl: str = "5m", style: Style = "anthropic"
         ) -> list[dict[str, Any]]:
    """The messages with breakpoints on the system prompt and the last three others.

    Placement: string content becomes one text block carrying the marker; list content
    carries it on its last block; empty content and tool results carry it on the message
    (the Anthropic conversion puts it on the block it becomes). In the `openai` style (a
    router in front of Claude) markers live only in content parts, so a message with
    nothing to carry one is left unmarked rather than given an unknown field.
    """
    chosen = _breakpoints(messages)
    if not chosen:
        return messages
    tag = marker(ttl)
    marked = list(messages)  # a new list; untouched messages are the same objects
    for i in chosen:
        marked[i] = _marked(messages[i], tag, style)
    return marked


def _breakpoints(messages: list[dict[str, Any]]) -> list[int]:
    """Indexes to mark, found from both ends: the cost does not grow with the history."""
    system = next((i for i, m in enumerate(messages) if m.get("role") == "system"), None)
    others: list[int] = []
    for i in range(len(messages) - 1, -1, -1):
        if len(others) == LAST_N:
            break
        if messages[i].get("role") != "system":
            others.append(i)
    return ([system] if system is not None else []) + others[::-1]


def _marked(message: dict[str, Any], tag: dict[str, str], style: Style) -> dict[str, Any]:
    content = message.get("content")
    if style == "anthropic" and message.get("role") == "tool":
        return {**message, "cache_control": tag}  # goes on the tool_result block itself
    if isinstance(content, str) and content:
        return {**message, "content": [{"type": "text", "text": content,
                                        "cache_control": tag}]}
    if isinstance(content, list) and content and isinstance(content[-1], dict):
        return {**message, "content": [*content[:-1], {**content[-1], "cache_control": tag}]}
    if style == "openai":
        return message
    return {**message, "cache_control": tag}  # empty content still holds a breakpoint
