"""Rough token accounting: per-message estimates cached once, running totals, calibration.

The estimate is characters / 4 over what the provider will read (docs/architecture.md,
"Token accounting"). It is computed once per message and cached beside the message, so
"would this request fit?" is a running total plus two constants, never a rescan of the
history.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, overload

from agent.attachments.parts import is_attachment, model_chars
from agent.messages import Message
from agent.redact import redact_message

# What one picture costs, by provider (docs/architecture.md, "Token accounting"): Claude
# reads a picture scaled to about 1.15 megapixels as up to ~1,600 tokens; OpenAI's
# high-detail rate for a picture of up to 1,568 px is 765 (85 + 4 tiles of 170). A model
# that cannot see pictures reads a one-line note instead.
IMAGE_TOKENS = 1_600
IMAGE_TOKENS_BY_PROVIDER = {"anthropic": 1_600, "openai": 765}
IMAGE_NOTE_TOKENS = 20
MESSAGE_OVERHEAD = 4  # role, separators and framing every chat format adds per message
CHARS_PER_TOKEN = 4


def image_tokens(provider: str, vision: bool) -> int:
    """The estimate for one picture sent to this provider (a note when it cannot see)."""
    return IMAGE_TOKENS_BY_PROVIDER.get(provider, IMAGE_TOKENS) if vision else IMAGE_NOTE_TOKENS


def estimate_text(text: str | None) -> int:
    """Characters / 4, rounded up."""
    return -(-len(text) // CHARS_PER_TOKEN) if text else 0


def content_chars(content: Any) -> tuple[int, int]:
    """(characters of text, number of images) in a content value of any shape."""
    if content is None:
        return 0, 0
    if isinstance(content, str):
        return len(content), 0
    if isinstance(content, list):
        chars = images = 0
        for part in content:
            c, i = _part_chars(part)
            chars += c
            images += i
        return chars, images
    return len(str(content)), 0


def _part_chars(part: Any) -> tuple[int, int]:
    if isinstance(part, str):
        return len(part), 0
    if not isinstance(part, dict):
        return len(str(part)), 0
    if is_attachment(part):
        return model_chars(part)
    kind = part.get("type")
    if kind in ("image_url", "image", "input_image"):
        return 0, 1
    if "text" in part:
        return len(part.get("text") or ""), 0
    if "content" in part:  # an Anthropic tool_result block
        return content_chars(part.get("content"))
    if "input" in part:  # an Anthropic tool_use block
        raw = part["input"]
        return len(raw if isinstance(raw, str) else json.dumps(raw)), 0
    return 0, 0


def estimate_message(msg: Message, image_cost: int = IMAGE_TOKENS) -> int:
    """Tokens the provider will read for one message: text, images, tool calls, results.

    `image_cost` is what one picture costs with the provider at hand (`image_tokens`)."""
    content = msg.get("content")
    # Plain-string content is the common shape; `content_chars` gives it the same count.
    chars, images = (len(content), 0) if isinstance(content, str) else content_chars(content)
    calls = msg.get("tool_calls")
    if calls:
        chars += calls_chars(calls)
    if msg.get("role") == "tool":
        chars += len(msg.get("tool_call_id") or "")
    # The summarizer's renderer counts a cold span with this formula too (`raw_pieces`).
    return -(-chars // CHARS_PER_TOKEN) + images * image_cost + MESSAGE_OVERHEAD


def calls_chars(calls: Any) -> int:
    """Characters of the tool names and argument strings of a message's tool calls."""
    chars = 0
    for call in calls:
        fn = call.get("function") if isinstance(call, dict) else None
        if isinstance(fn, dict):
            chars += len(fn.get("name") or "") + len(fn.get("arguments") or "")
    return chars


def estimate_messages(msgs: Iterable[Message]) -> int:
    """Rough tokens of a list of messages (uncached: for one-off sizes such as feedback)."""
    return sum(estimate_message(m) for m in msgs)


def over_share(tokens: int, window: int, share: float = 1.0) -> bool:
    """The one "is this too big?" test: do `tokens` reach `share` of `window`?

    The oversize check of a new message, gateway hygiene and the compressor's triggers
    all ask it, each with its own share, of the one estimate above.
    """
    return window > 0 and tokens >= share * window


def estimate_tools(tools: Sequence[dict[str, Any]] | None) -> int:
    """Tool schemas travel as JSON with every request."""
    if not tools:
        return 0
    return estimate_text(json.dumps(tools, separators=(",", ":"), ensure_ascii=False))


class _Entry:
    """What we know about one message. Holding `msg` pins its id while the entry lives."""

    __slots__ = ("msg", "tokens", "redacted")

    def __init__(self, msg: Message, tokens: int) -> None:
        self.msg = msg
        self.tokens = tokens
        self.redacted: Message | None = None


_MISSING = object()


class TokenCache:
    """Per-message estimates and redacted forms, each computed once.

    Keyed by `id(msg)`: messages are never mutated in this codebase, and the entry keeps a
    reference to the dict, so an id cannot be reused by another message while cached.
    Derived values live in one `id -> value` map per kind, never without an entry for the
    same id (which pins it): a compaction then collects ~2,000 of them in one C-level `map`.
    """

    def __init__(self, redactor: Callable[[Message], Message] = redact_message, *,
                 image_cost: int = IMAGE_TOKENS) -> None:
        self.image_cost = image_cost  # one picture, for the provider at hand
        self._entries: dict[int, _Entry] = {}
        self._derived: dict[str, dict[int, Any]] = {}  # kind -> id(msg) -> value
        self._redactor = redactor
        self._tools: tuple[Any, int] | None = None  # (the tools list, its estimate)
        # Other per-message work to do at ingest (e.g. the summarizer's rendering), so a
        # compaction finds everything ready instead of paying for the whole middle at once.
        self.warmers: list[Callable[[Message], Any]] = []
        # Redaction and warmers run only once a transcript holds this many tokens: a chat
        # far from its first compaction (most chats) never pays for them. The engine
        # sets it below its threshold, so pieces are ready well before they are needed.
        self.warm_from = 0

    def __len__(self) -> int:
        return len(self._entries)

    def _entry(self, msg: Message) -> _Entry:
        entry = self._entries.get(id(msg))
        if entry is None:
            entry = self._entries[id(msg)] = _Entry(msg, estimate_message(msg, self.image_cost))
        return entry

    def tokens(self, msg: Message) -> int:
        entry = self._entries.get(id(msg))
        return entry.tokens if entry is not None else self._entry(msg).tokens

    def total(self, msgs: Iterable[Message]) -> int:
        """Summed estimates. A message not cached yet is estimated but not kept: a plain
        list (a history loaded from the store) is usually summed once and then compacted,
        and an entry costs several times the estimate it would save."""
        entries = self._entries
        image_cost = self.image_cost
        total = 0
        for msg in msgs:
            entry = entries.get(id(msg))
            total += entry.tokens if entry is not None else estimate_message(msg, image_cost)
        return total

    def redacted(self, msg: Message) -> Message:
        """The message with secrets replaced; the same dict when it held none."""
        # A hit is one dict lookup: the renderer asks for every message it renders.
        entry = self._entries.get(id(msg)) or self._entry(msg)
        redacted = entry.redacted
        if redacted is None:
            redacted = entry.redacted = self._redactor(msg)
        return redacted

    def derived(self, msg: Message, key: str, compute: Callable[[Message], Any]) -> Any:
        """Any other per-message value (e.g. the summarizer's rendering), computed once."""
        values = self._derived.get(key)
        if values is None:
            values = self._derived[key] = {}
        found = values.get(id(msg), _MISSING)
        if found is not _MISSING:
            return found
        if id(msg) not in self._entries:
            self._entry(msg)  # pins the id for as long as the value is kept
        value = values[id(msg)] = compute(msg)
        return value

    def is_warm(self, msg: Message, key: str) -> bool:
        """Whether `derived(msg, key, ...)` would be a cache hit."""
        return id(msg) in self._derived.get(key, ())

    def values(self, msgs: Iterable[Message], key: str) -> list[Any]:
        """The cached `key` value of each message, None where it was never computed."""
        values = self._derived.get(key)
        if values is None:
            return [None for _ in msgs]
        return list(map(values.get, map(id, msgs)))

    def ingest(self, msg: Message, *, redact: bool = True) -> int:
        """Warm the cache for a newly stored message; returns its estimate."""
        entry = self._entries.get(id(msg)) or self._entry(msg)
        if redact and entry.redacted is None:
            entry.redacted = self._redactor(msg)
            for warm in self.warmers:
                warm(msg)
        return entry.tokens

    def tools_tokens(self, tools: Sequence[dict[str, Any]] | None) -> int:
        """Estimate of a tool-schema list; recomputed only when a different list is passed."""
        if not tools:
            return 0
        cached = self._tools
        if cached is not None and cached[0] is tools:
            return cached[1]
        value = estimate_tools(tools)
        self._tools = (tools, value)
        return value

    def discard(self, msgs: Iterable[Message]) -> None:
        """Forget messages that left the live transcript (after a compaction)."""
        for msg in msgs:
            entry = self._entries.get(id(msg))
            if entry is not None and entry.msg is msg:
                del self._entries[id(msg)]
                for values in self._derived.values():
                    values.pop(id(msg), None)

    def retain(self, msgs: Iterable[Message]) -> None:
        """Keep only these messages' entries: a compaction's output is the live transcript."""
        entries = self._entries
        kept: dict[int, _Entry] = {}
        for msg in msgs:
            entry = entries.get(id(msg))
            if entry is not None and entry.msg is msg:
                kept[id(msg)] = entry
        self._entries = kept
        self._derived = {key: {i: values[i] for i in kept if i in values}
                         for key, values in self._derived.items()}

    def clear(self) -> None:
        self._entries.clear()
        self._derived.clear()
        self._tools = None


class Calibration:
    """Smoothed ratio of provider-reported prompt tokens to our estimate of the same request."""

    MIN_RATIO = 0.5
    MAX_RATIO = 3.0
    ALPHA = 0.3  # weight of the newest observation
    MIN_SAMPLE = 32  # tiny requests are dominated by framing we do not model

    def __init__(self, ratio: float = 1.0, samples: int = 0) -> None:
        self.ratio = self._clamp(ratio)
        self.samples = samples

    @classmethod
    def _clamp(cls, value: float) -> float:
        if not math.isfinite(value):
            return 1.0
        return min(cls.MAX_RATIO, max(cls.MIN_RATIO, value))

    def observe(self, estimated: int, prompt_tokens: int) -> None:
        if estimated < self.MIN_SAMPLE or prompt_tokens <= 0:
            return
        sample = self._clamp(prompt_tokens / estimated)
        # The first sample replaces the neutral 1.0 outright; later ones are smoothed.
        self.ratio = sample if self.samples == 0 else self._clamp(
            self.ALPHA * sample + (1 - self.ALPHA) * self.ratio)
        self.samples += 1

    def apply(self, tokens: int) -> int:
        return math.ceil(tokens * self.ratio)


class Transcript(Sequence[Message]):
    """The live message list with a running token total, so fit checks are O(1).

    The host appends messages as they arrive (each estimated and redacted once), replaces
    the whole list after a compaction, and asks `raw_estimate()` for the request size.
    """

    def __init__(self, cache: TokenCache, messages: Iterable[Message] = (), *,
                 system_prompt: str | None = None,
                 tools: Sequence[dict[str, Any]] | None = None) -> None:
        self.cache = cache
        self._messages: list[Message] = []
        self._total = 0
        self._overhead = 0
        self.set_request_overhead(system_prompt, tools)
        self.extend(messages)

    # --- Sequence ---------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._messages)

    @overload
    def __getitem__(self, index: int) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> list[Message]: ...
    def __getitem__(self, index: int | slice) -> Message | list[Message]:
        return self._messages[index]

    def __iter__(self) -> Iterator[Message]:
        return iter(self._messages)

    # --- mutation ---------------------------------------------------------------------
    def append(self, msg: Message) -> None:
        cache = self.cache
        warm = self._total >= cache.warm_from
        self._total += cache.ingest(msg, redact=warm)
        self._messages.append(msg)
        if not warm and self._total >= cache.warm_from:  # just got near a compaction
            for earlier in self._messages:
                cache.ingest(earlier)  # redacts and warms what was only estimated

    def extend(self, msgs: Iterable[Message]) -> None:
        for msg in msgs:
            self.append(msg)

    def replace(self, msgs: Iterable[Message]) -> None:
        """Swap in a compacted list; messages that left are dropped from the cache."""
        new = list(msgs)
        kept = {id(m) for m in new}
        self.cache.discard(m for m in self._messages if id(m) not in kept)
        self._messages, self._total = [], 0
        self.extend(new)

    def set_request_overhead(self, system_prompt: str | None = None,
                             tools: Sequence[dict[str, Any]] | None = None) -> None:
        """A system prompt kept outside the message list, and the tool schemas sent along."""
        system = estimate_text(system_prompt) + MESSAGE_OVERHEAD if system_prompt else 0
        self._overhead = system + self.cache.tools_tokens(tools)

    # --- reading ----------------------------------------------------------------------
    @property
    def total(self) -> int:
        """Estimated tokens of the messages alone."""
        return self._total

    def raw_estimate(self) -> int:
        """Messages + system prompt + tools, uncalibrated: what calibration compares against."""
        return self._total + self._overhead

    def as_list(self) -> list[Message]:
        return list(self._messages)
