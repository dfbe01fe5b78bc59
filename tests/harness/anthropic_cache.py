"""Prompt caching as the Anthropic Messages API does it, for the fake server.

The prompt is read as one sequence of blocks: tools, then system blocks, then message
content blocks, in request order. A `cache_control` marker makes the prefix up to and
including its block a breakpoint. Each block carries the hash of the prefix ending there
(model name plus every block so far, `cache_control` removed, keys sorted), so two requests
share a cache entry exactly when they share that prefix byte for byte.

On a request: the longest live cached prefix ending at a breakpoint, or at one of the
LOOKBACK_BLOCKS block boundaries before a breakpoint (the real API's automatic look-back),
is read; every breakpoint after it is written with its own TTL; what follows the last
breakpoint is plain input. Prefixes shorter than the minimum cacheable length are not
written. A hit refreshes the entry's TTL. The write is split by TTL the way the API bills
it: up to the last 1h breakpoint at 1h, the rest at 5m.

Token counts come from cumulative characters, so input + read + write always equals the
uncached count of the whole prompt. Tools are hashed but bill no characters (the fake's
counting rule predates caching and must not change), so a tools-only prefix never reaches
the minimum. Not simulated: invalidation by tool_choice, images or thinking settings,
per-organization isolation, and the best-effort nature of real hits (here a live entry
always hits).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

from tests.harness.base import text_of

TTL_SECONDS = {"5m": 300.0, "1h": 3600.0}
LOOKBACK_BLOCKS = 20
DEFAULT_MIN_CACHEABLE_TOKENS = 1024


@dataclass(frozen=True)
class PromptBlock:
    """One block in cache order: billed characters, prefix hash, cache markers on or in it."""

    where: str
    chars: int
    digest: str
    markers: tuple[tuple[str, str], ...] = ()  # (where, ttl), in processing order

    @property
    def ttl(self) -> str | None:
        """TTL of the breakpoint this block is, or None when it carries no marker."""
        return self.markers[0][1] if self.markers else None


def _content_blocks(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return content if isinstance(content, list) else []


def without_markers(value: Any) -> Any:
    """A request part without its cache markers (they move to the newest messages)."""
    if isinstance(value, dict):
        return {k: without_markers(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [without_markers(v) for v in value]
    return value


def _markers(block: Any, where: str) -> list[tuple[str, str]]:
    if not isinstance(block, dict):
        return []
    found = []
    marker = block.get("cache_control")
    if isinstance(marker, dict):
        found.append((where, marker.get("ttl", "5m")))
    if block.get("type") == "tool_result" and isinstance(block.get("content"), list):
        for k, inner in enumerate(block["content"]):
            found += _markers(inner, f"{where}.content.{k}")
    return found


def _message_block_chars(block: dict[str, Any]) -> int:
    if block.get("type") == "tool_use":
        return len(block.get("name", "")) + len(json.dumps(block.get("input", {})))
    return len(text_of([block]))


def _items(body: dict[str, Any]) -> list[tuple[str, Any, int, Any]]:
    """(where, canonical identity, billed chars, raw block) for every block in cache order."""
    items: list[tuple[str, Any, int, Any]] = []
    for i, tool in enumerate(body.get("tools") or []):
        items.append((f"tools.{i}", ["tools", tool], 0, tool))
    seen_text = False
    for i, block in enumerate(_content_blocks(body.get("system"))):
        text = text_of([block])
        # The billed system text is the blocks joined with "\n": the newline goes to the later one.
        items.append((f"system.{i}", ["system", block],
                      len(text) + (1 if text and seen_text else 0), block))
        seen_text = seen_text or bool(text)
    for i, message in enumerate(body.get("messages") or []):
        role = message.get("role") if isinstance(message, dict) else None
        content = message.get("content") if isinstance(message, dict) else None
        for j, block in enumerate(_content_blocks(content)):
            chars = _message_block_chars(block) if isinstance(block, dict) else 0
            items.append((f"messages.{i}.content.{j}", ["messages", i, role, block], chars, block))
    return items


def prompt_blocks(body: dict[str, Any]) -> list[PromptBlock]:
    """The request's blocks in cache order, each with the hash of the prefix ending there."""
    digest = hashlib.sha256(str(body.get("model", "")).encode()).hexdigest()
    blocks = []
    for where, identity, chars, raw in _items(body):
        canonical = json.dumps(without_markers(identity), sort_keys=True, separators=(",", ":"))
        digest = hashlib.sha256(f"{digest}\n{canonical}".encode()).hexdigest()
        blocks.append(PromptBlock(where, chars, digest, tuple(_markers(raw, where))))
    return blocks


def ttl_order_problem(blocks: list[PromptBlock]) -> str | None:
    """The real API's refusal when a 1h marker follows a 5m one, else None."""
    seen_short = False
    for block in blocks:
        for where, ttl in block.markers:
            if ttl == "1h" and seen_short:
                return (f"{where}.cache_control.ttl: a ttl='1h' cache_control block must not "
                        "come after a ttl='5m' cache_control block. Note that blocks are "
                        "processed in the following order: `tools`, `system`, `messages`.")
            seen_short = seen_short or ttl == "5m"
    return None


@dataclass
class _Entry:
    ttl: float
    expires_at: float


class PromptCache:
    """Cached prefixes by hash, with expiry; totals of tokens read from and written to it."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}
        self.read_tokens = 0
        self.written_tokens = 0

    def live_entries(self, now: float) -> int:
        return sum(1 for e in self._entries.values() if now < e.expires_at)

    def clear(self) -> None:
        self._entries.clear()

    def _longest_hit(self, blocks: list[PromptBlock], breakpoints: list[int],
                     now: float) -> int:
        """Index of the last block of the longest live cached prefix in reach, or -1."""
        reach = {j for p in breakpoints for j in range(max(0, p - LOOKBACK_BLOCKS), p + 1)}
        for j in sorted(reach, reverse=True):
            entry = self._entries.get(blocks[j].digest)
            if entry is not None and now < entry.expires_at:
                return j
        return -1

    def settle(self, blocks: list[PromptBlock], count_tokens: Callable[[int], int], *,
               now: float, min_tokens: int) -> dict[str, Any]:
        """Read and write the cache for one request; return its usage fields (no output)."""
        ends = list(accumulate(b.chars for b in blocks))

        def tokens(index: int) -> int:
            return count_tokens(ends[index]) if index >= 0 else 0

        breakpoints = [i for i, b in enumerate(blocks) if b.ttl]
        hit = self._longest_hit(blocks, breakpoints, now)
        if hit >= 0:
            entry = self._entries[blocks[hit].digest]
            entry.expires_at = now + entry.ttl
        written = [p for p in breakpoints if p > hit and tokens(p) >= min_tokens]
        for p in written:
            ttl = TTL_SECONDS[blocks[p].ttl or "5m"]
            self._entries[blocks[p].digest] = _Entry(ttl, now + ttl)
        read = tokens(hit)
        cached_end = tokens(written[-1]) if written else read
        hour_end = max((p for p in written if blocks[p].ttl == "1h"), default=hit)
        one_hour = tokens(hour_end) - read
        self.read_tokens += read
        self.written_tokens += cached_end - read
        return {"input_tokens": tokens(len(blocks) - 1) - cached_end,
                "cache_read_input_tokens": read,
                "cache_creation_input_tokens": cached_end - read,
                "cache_creation": {"ephemeral_5m_input_tokens": cached_end - read - one_hour,
                                   "ephemeral_1h_input_tokens": one_hour}}
