"""How compacted turns look to the summarizer: original text, head/tail-truncated, with headers.

The summarizer reads the *original* messages (already redacted), never pruned one-liners.
Each rendering depends only on its message (and, for a tool result, on the call that
produced it), so it is computed once per message and cached in the `TokenCache`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agent.compression.markers import split_summary
from agent.messages import content_text
from agent.tokens import Message, TokenCache

BODY_LIMIT = 5_500
HEAD_KEEP = 4_000
TAIL_KEEP = 1_500
KEY_ARG_LIMIT = 3  # key arguments named in a tool-result header
KEY_ARG_CHARS = 120


def truncate_middle(text: str, limit: int = BODY_LIMIT, head: int = HEAD_KEEP,
                    tail: int = TAIL_KEEP) -> str:
    """Keep the first `head` and last `tail` characters of a body longer than `limit`."""
    if len(text) <= limit:
        return text
    omitted = len(text) - head - tail
    return f"{text[:head]}\n[… {omitted} characters omitted …]\n{text[len(text) - tail:]}"


def fit_chars(text: str, limit: int) -> str:
    """Head/tail-cut `text` to at most `limit` characters (for very small summary windows)."""
    if len(text) <= limit:
        return text
    marker_room = 48
    if limit <= marker_room * 2:
        return text[:limit]
    keep = limit - marker_room
    head = keep * 8 // 11  # the same 4,000 : 1,500 proportion as the normal cut
    return truncate_middle(text, 0, head, keep - head)[:limit]


# --- per-message rendering -------------------------------------------------------------
def _call_parts(msg: Message) -> list[tuple[str, str, str]]:
    """(call id, tool name, key arguments) for each tool call of an assistant message."""
    out: list[tuple[str, str, str]] = []
    for call in msg.get("tool_calls") or ():
        if not isinstance(call, dict):
            continue
        fn = call.get("function") or {}
        out.append((str(call.get("id") or ""), str(fn.get("name") or "tool"),
                    key_arguments(fn.get("arguments"))))
    return out


def key_arguments(raw: Any) -> str:
    """A few short scalar arguments (path, command, query...) that identify a call."""
    try:
        args = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return truncate_middle(str(raw), KEY_ARG_CHARS, KEY_ARG_CHARS - 20, 20)
    if not isinstance(args, dict):
        return ""
    picked: list[str] = []
    for key, value in args.items():
        if isinstance(value, str) and len(value) <= KEY_ARG_CHARS:
            picked.append(f'{key}="{value}"')
        elif isinstance(value, bool | int | float):
            picked.append(f"{key}={value}")
        if len(picked) == KEY_ARG_LIMIT:
            break
    return ", ".join(picked)


def _render_body(msg: Message) -> tuple[str, int]:
    """(rendered text without a tool header, full size in characters) of a redacted message."""
    role = msg.get("role") or "user"
    text = content_text(msg.get("content"))
    if role == "tool":
        return truncate_middle(text), len(text)
    lines = [f"### {role}"]
    if text:
        lines.append(truncate_middle(text))
    for call in msg.get("tool_calls") or ():
        fn = call.get("function") or {} if isinstance(call, dict) else {}
        args = fn.get("arguments")
        args_text = args if isinstance(args, str) else json.dumps(args)
        lines.append(f"→ calls {fn.get('name') or 'tool'}: {truncate_middle(args_text or '')}")
    return "\n".join(lines), len(text)


Calls = dict[str, tuple[str, str]]  # call id -> (tool name, key arguments)


class TurnRenderer:
    """Renders the compacted span for the summarizer, one cached piece per message.

    `warm` is registered as a TokenCache warmer, so each message is rendered once when it
    is stored (a tool result right after the call that produced it, which names the tool in
    its header); a compaction then mostly collects finished pieces.
    """

    def __init__(self, cache: TokenCache) -> None:
        self.cache = cache
        self._recent_calls: Calls = {}  # the calls of the last assistant message warmed

    def _calls(self, msg: Message) -> list[tuple[str, str, str]]:
        return _call_parts(self.cache.redacted(msg))

    def _piece(self, msg: Message, calls: Calls) -> str:
        body, size = _render_body(self.cache.redacted(msg))
        if msg.get("role") != "tool":
            return body
        name, key = calls.get(str(msg.get("tool_call_id")), ("unknown tool", ""))
        args = f" ({key})" if key else ""
        return f"### tool result: {name}{args}, {size:,} characters in full\n{body}"

    def warm(self, msg: Message) -> None:
        role = msg.get("role")
        if role == "assistant" and msg.get("tool_calls"):
            parts = self.cache.derived(msg, "calls", self._calls)
            self._recent_calls = {call_id: (name, key) for call_id, name, key in parts}
        elif role == "tool" and str(msg.get("tool_call_id")) not in self._recent_calls:
            return  # its call was not stored just before: render it at compaction time
        calls = self._recent_calls
        self.cache.derived(msg, "piece", lambda m: self._piece(m, calls))

    def render(self, originals: Sequence[Message]) -> list[str]:
        """One text per message; pieces missing from the cache are made (and kept) now."""
        pieces = self.cache.values(originals, "piece")
        if None not in pieces:
            return pieces
        calls: Calls = {}
        for i, msg in enumerate(originals):
            if msg.get("role") == "assistant" and msg.get("tool_calls"):
                for call_id, name, key in self.cache.derived(msg, "calls", self._calls):
                    calls[call_id] = (name, key)
            if pieces[i] is None:
                pieces[i] = self.cache.derived(msg, "piece", lambda m: self._piece(m, calls))
        return pieces


def recent_user_requests(originals: Sequence[Message], cache: TokenCache,
                         limit: int) -> list[str]:
    """Texts of the newest real user requests (not summaries), newest first, redacted."""
    out: list[str] = []
    for msg in reversed(originals):
        if msg.get("role") != "user":
            continue
        # Splitting the redacted form keeps a merged turn's own text redacted as well.
        _, rest = split_summary(cache.redacted(msg))
        text = content_text(rest).strip()
        if text:
            out.append(text)
            if len(out) >= limit:
                break
    return out
