"""How compacted turns look to the summarizer: original text, head/tail-truncated, with headers.

The summarizer reads the *original* messages, never pruned one-liners. Each rendering
depends only on its message (and, for a tool result, on the call that produced it), so it
is computed once per message and cached in the `TokenCache`.

Redaction runs on the finished rendering, so it covers exactly the text the summarizer
reads (a secret spelled with JSON escapes in tool arguments is caught once decoded for the
header). A text about to be cut is redacted before the cut, so no secret is split into a
half the patterns no longer recognise (docs/architecture.md, "Secrets").

setup.py compiles this module with Cython, typed by `render.pxd`; it stays plain Python and
is the reference the compiled loop is tested against (docs/architecture.md, "Compiled
modules").
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import orjson

from agent.compression.markers import split_summary
from agent.messages import content_text
from agent.redact import redact, redact_each
from agent.tokens import (
    CHARS_PER_TOKEN,
    MESSAGE_OVERHEAD,
    Message,
    TokenCache,
    calls_chars,
    content_chars,
)

# Our own markers are ASCII: a summary request joins hundreds of thousands of characters,
# and one wider character anywhere makes CPython store the whole joined prompt wider.
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
    return f"{text[:head]}\n[... {omitted} characters omitted ...]\n{text[len(text) - tail:]}"


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
Calls = dict[str, str]  # call id -> the start of its result's header
_SCALARS = (bool, int, float)
_UNKNOWN_CALL = "### tool result: unknown tool"


def _result_header(name: str, key: str) -> str:
    return f"### tool result: {name} ({key})" if key else f"### tool result: {name}"


def _function(call: Any) -> dict[str, Any]:
    fn = call.get("function") if isinstance(call, dict) else None
    return fn if isinstance(fn, dict) else {}


def _register_calls(msg: Message, calls: Calls) -> None:
    """Add an assistant message's calls to `calls`, as `_render_calls` does while rendering it."""
    for call in msg.get("tool_calls") or ():
        if isinstance(call, dict):
            fn = _function(call)
            calls[str(call.get("id") or "")] = _result_header(
                str(fn.get("name") or "tool"), key_arguments(fn.get("arguments")))


def key_arguments(raw: Any) -> str:
    """A few short scalar arguments (path, command, query...) that identify a call.

    A compaction reads the arguments of every call it renders, so they are parsed with
    orjson, about twice as fast as `json`. `json.loads` stays the judge of what is JSON:
    whatever orjson refuses (NaN, a lone surrogate escape, deep nesting) goes to it, and so
    does anything that picked a float, since orjson reads an integer beyond 64 bits as one.
    """
    if not isinstance(raw, str):  # already parsed (a dict from storage or a test)
        return _picked(raw, floats=True) or ""
    try:
        shown = _picked(orjson.loads(raw))
    except orjson.JSONDecodeError:
        shown = None
    if shown is None:
        try:
            shown = _picked(json.loads(raw), floats=True)
        except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
            text = raw if len(raw) <= KEY_ARG_CHARS else redact(raw)  # cut next: redact
            return truncate_middle(text, KEY_ARG_CHARS, KEY_ARG_CHARS - 20, 20)
    return shown


def _picked(args: Any, *, floats: bool = False) -> str | None:
    """The key arguments shown for parsed `args`; None if they picked a float and `floats`
    is false (the caller then parses again, exactly)."""
    if not isinstance(args, dict):
        return ""
    picked: list[str] = []
    for key, value in args.items():
        if isinstance(value, str):
            if len(value) > KEY_ARG_CHARS:
                continue
            picked.append(f'{key}="{value}"')
        elif isinstance(value, _SCALARS):
            if not floats and isinstance(value, float):
                return None
            picked.append(f"{key}={value}")
        else:
            continue
        if len(picked) == KEY_ARG_LIMIT:
            break
    return ", ".join(picked)


def raw_piece(msg: Message, calls: Calls) -> str:
    """One message as the summarizer reads it, before redaction (only cut text is redacted)."""
    return raw_pieces((msg,), calls, 0)[0][0]


def raw_pieces(msgs: Iterable[Message], calls: Calls,
               image_cost: int) -> tuple[list[str], int]:
    """`raw_piece` of each message, and their summed token estimates: what
    `estimate_message(msg, image_cost)` gives each, summed from the fields the rendering
    reads anyway. A span loaded cold is rendered and counted in this one loop, each
    message read once (`tests/agent/test_render.py` holds the two counts equal).

    A tool result is headed by the call that produced it, looked up in `calls`; an
    assistant message adds its own calls to `calls` as it is rendered, so a result after
    it finds them."""
    pieces: list[str] = []
    append = pieces.append
    total = 0
    for msg in msgs:
        role = msg.get("role") or "user"
        content = msg.get("content")
        if isinstance(content, str):
            text, chars, images = content, len(content), 0
        else:
            text = content_text(content)
            chars, images = content_chars(content)
        # A text about to be cut is redacted first (the module doc), here and for arguments.
        body = truncate_middle(redact(text)) if len(text) > BODY_LIMIT else text
        tool_calls = msg.get("tool_calls")
        if role == "tool":
            call_id = msg.get("tool_call_id")
            chars += len(call_id or "") + (calls_chars(tool_calls) if tool_calls else 0)
            header = calls.get(str(call_id), _UNKNOWN_CALL)
            append(f"{header}, {len(text):,} characters in full\n{body}")
        elif not tool_calls:
            append(f"### {role}\n{body}" if body else f"### {role}")
        else:
            chars += _render_calls(role, body, tool_calls, calls, append)
        # `estimate_message`'s formula, over the characters counted above.
        total += -(-chars // CHARS_PER_TOKEN) + images * image_cost + MESSAGE_OVERHEAD
    return pieces, total


def _render_calls(role: str, body: str, tool_calls: Any, calls: Calls,
                  append: Callable[[str], None]) -> int:
    """Append a message that makes tool calls; return the calls' characters."""
    lines = [f"### {role}", body] if body else [f"### {role}"]
    register = role == "assistant"
    chars = 0
    for call in tool_calls:
        fn = _function(call)
        name = fn.get("name")
        args = fn.get("arguments")
        chars += len(name or "") + len(args or "")
        name = name or "tool"
        if register and isinstance(call, dict):
            calls[str(call.get("id") or "")] = _result_header(str(name), key_arguments(args))
        args_text = args if isinstance(args, str) else json.dumps(args)
        if len(args_text) > BODY_LIMIT:
            args_text = truncate_middle(redact(args_text))
        lines.append(f"-> calls {name}: {args_text}")
    append("\n".join(lines))
    return chars


class TurnRenderer:
    """Renders the compacted span for the summarizer, one cached piece per message.

    `warm` is registered as a TokenCache warmer, so each message is rendered once when it
    is stored (a tool result right after the call that produced it, which names the tool in
    its header); a compaction then mostly collects finished pieces.
    """

    def __init__(self, cache: TokenCache) -> None:
        self.cache = cache
        self._recent_calls: Calls = {}  # the calls of the last assistant message warmed

    def warm(self, msg: Message) -> None:
        role = msg.get("role")
        if role == "assistant" and msg.get("tool_calls"):
            self._recent_calls = {}  # filled as the message is rendered
        elif role == "tool" and str(msg.get("tool_call_id")) not in self._recent_calls:
            return  # its call was not stored just before: render it at compaction time
        calls = self._recent_calls
        self.cache.derived(msg, "piece", lambda m: redact(raw_piece(m, calls)))

    def render(self, originals: Sequence[Message]) -> tuple[list[str], int | None]:
        """(one text per message, their summed token estimates or None): the cached pieces,
        and the rest rendered now (not kept: an unwarmed span is a one-off list, and a
        compaction drops it anyway). Only a span never warmed is counted as it is rendered;
        a warmed one's messages are in the cache, counted already."""
        pieces = self.cache.values(originals, "piece")
        if None not in pieces:
            return pieces, None
        calls: Calls = {}
        if pieces.count(None) == len(pieces):  # nothing warmed: a span loaded cold
            raw, tokens = raw_pieces(originals, calls, self.cache.image_cost)
            return redact_each(raw), tokens
        missing: list[int] = []
        raw: list[str] = []
        for i, msg in enumerate(originals):
            if pieces[i] is None:
                missing.append(i)
                raw.append(raw_piece(msg, calls))
            elif msg.get("role") == "assistant" and msg.get("tool_calls"):
                _register_calls(msg, calls)
        for i, piece in zip(missing, redact_each(raw), strict=True):
            pieces[i] = piece
        return pieces, None


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
