"""Values that cross the storage boundary: small frozen dataclasses and plain dicts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class SessionRecord:
    id: str
    chat_key: str
    parent_session_id: str | None
    kind: str  # root | compression | branch
    end_reason: str | None  # None while live; compression | reset | expired ...
    started_at: float  # unix seconds
    ended_at: float | None
    model: str | None
    system_prompt: str | None
    title: str | None = None
    compression_count: int = 0
    engine_state: dict[str, Any] = field(default_factory=dict)
    last_prompt_tokens: int | None = None
    message_count: int = 0
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def live(self) -> bool:
        return self.end_reason is None


@dataclass(frozen=True)
class NewMessage:
    """A message to append: OpenAI-format dict plus what the store keeps beside it."""

    message: dict[str, Any]  # role, content (str | list), tool_calls?, tool_call_id?, name?
    tokens: int = 0  # cached rough estimate
    platform_message_id: str | None = None
    answered: bool | None = None  # None for anything but inbound user messages
    sender_id: str | None = None
    sender_name: str | None = None


@dataclass(frozen=True)
class StoredMessage:
    id: int  # row id, stable across sessions
    session_id: str
    seq: int
    message: dict[str, Any]  # OpenAI format, exactly as appended
    tokens: int
    created_at: float
    platform_message_id: str | None = None
    answered: bool | None = None
    sender_id: str | None = None
    sender_name: str | None = None


@dataclass(frozen=True)
class ChatActivity:
    """A chat's live session and when the chat last spoke (unix seconds)."""

    chat_key: str
    session_id: str
    last_at: float


@dataclass(frozen=True)
class ChatSummary:
    """One chat as an operator sees it (the web view): what it holds and what it spent."""

    chat_key: str
    session_id: str | None  # the chat's current session
    last_at: float  # its last message in, or its newest session's start
    sessions: int
    compactions: int
    messages: int
    usage: dict[str, UsageTotals]  # by model


@dataclass(frozen=True)
class InboundRecord:
    """One row of the once-only ledger, with enough to replay it after a restart."""

    id: int
    platform: str
    chat_id: str
    message_id: str
    chat_key: str
    text: str
    sender_id: str | None
    sender_name: str | None
    received_at: float
    status: str  # pending | taken | answered | failed
    message_row_id: int | None = None  # the messages row once appended to a session
    extra: dict[str, Any] = field(default_factory=dict)  # is_group, thread_id, ...
    # The stored reply while it is not yet delivered (status stays `taken` until the
    # platform accepted it); recovery sends it instead of asking the model again.
    reply_row_id: int | None = None
    # Turns started on this message: one when taken, one more for each restart that found
    # it taken (its turn was cut short). A message that keeps killing the process is
    # skipped after its second attempt (docs/architecture.md, "Poison messages").
    attempts: int = 0
    # Set by `ingest` where several processes share the ledger: the chat's rows that were
    # open when this one was stored (the holder routes them first, in the platform's
    # order, without reading them again). None: not known.
    open_before: tuple[int, ...] | None = None
    # Also set by `ingest` there: the process that holds the chat's lease (unexpired) when
    # it is another one (the store has told it the notice is sent: no need to claim the
    # chat); None when it is this one, nobody, or not known.
    held_by: str | None = None


@dataclass(frozen=True, kw_only=True)
class TokenCounts:
    """The five token counts of a provider call (or a sum of calls), by name."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0


@dataclass(frozen=True)
class UsageRecord(TokenCounts):
    """One provider call to store: which model, for what (chat | summary | ...), how much."""

    model: str
    purpose: str
    usd: float = 0.0  # the call's cost, as the gateway priced it
    # The spend counters (opaque keys made by the gateway) this call adds to, in the
    # transaction that stores it.
    spend_keys: tuple[str, ...] = ()

    @property
    def spent_tokens(self) -> int:
        """What a budget counts: everything the call read and wrote (reasoning is output)."""
        return (self.input_tokens + self.output_tokens + self.cache_read_tokens
                + self.cache_write_tokens)


@dataclass(frozen=True)
class UsageTotals(TokenCounts):
    calls: int = 0


@dataclass(frozen=True)
class Compaction:
    """A continuation to create: the compacted transcript becomes the child's history."""

    messages: tuple[NewMessage, ...]
    engine_state: dict[str, Any] = field(default_factory=dict)
    # How many of the parent's stored messages (before this turn's `before`, which is always
    # covered) the transcript was made from. When set, messages the parent gained since
    # (another process's turn) are carried into the continuation after the compacted ones,
    # so a compaction computed from a stale history never drops a turn. None: no carry-over.
    covers: int | None = None
    # For each of `messages`, the position of the message it copies verbatim in the
    # transcript it was made from (None for new ones such as the summary). Positions below
    # `covers` are the parent's seqs; the rest count on through this turn's `before`. A
    # copy keeps the original's metadata (platform id, answered flag, sender), and inbound
    # rows that pointed at the original point at the copy, so the ended parent never changes.
    sources: tuple[int | None, ...] = ()


@dataclass(frozen=True)
class TurnRecord:
    """Everything one turn writes, committed in one transaction by `record_turn`.

    Order of effects: `before` is appended to the session; then, if `compaction` is set,
    the session ends with end_reason='compression' and its continuation is created holding
    `compaction.messages`; then `after` is appended to the live session (the child when a
    compaction happened). `failed` inbound ids are marked failed; usage rows are attributed
    to the session that was live when they were spent (parent for before/compaction, child
    for after is acceptable: totals are chain-wide); `engine_state` and `last_prompt_tokens`
    are saved on the session that is live at the end.

    `replied` inbound rows get the turn's last message as their stored reply; they stay
    `taken` until `finish_inbound(..., "answered")` says the platform accepted it.
    """

    before: tuple[NewMessage, ...] = ()
    compaction: Compaction | None = None
    after: tuple[NewMessage, ...] = ()
    replied: tuple[int, ...] = ()  # inbound ids
    failed: tuple[int, ...] = ()  # inbound ids
    usage: tuple[UsageRecord, ...] = ()
    engine_state: dict[str, Any] | None = None
    last_prompt_tokens: int | None = None
    # The reply as the platform will receive it, recorded as pending deliveries of the
    # last `replied` row in the same transaction, before the first chunk is sent.
    delivery: tuple[OutChunk, ...] = ()
    # The spend hold (SessionStore.hold_spend) this turn placed: removed in the same
    # transaction that books the turn's usage, so its cost is never counted twice.
    release_hold: str | None = None


@dataclass(frozen=True)
class SpendLimit:
    """A budget on one spend counter: reached once what is spent and held meets a limit
    (None: no limit of that kind)."""

    key: str
    usd: float | None
    tokens: int | None

    def reached_by(self, spent: Spent) -> bool:
        return ((self.usd is not None and spent.usd >= self.usd)
                or (self.tokens is not None and spent.tokens >= self.tokens))


@dataclass(frozen=True)
class Spent:
    """A spend counter with the live holds under its key."""

    usd: float = 0.0
    tokens: int = 0


@dataclass(frozen=True)
class OutChunk:
    """One platform message of a reply: its text and platform formatting (entities)."""

    text: str
    entities: tuple[dict[str, Any], ...] = ()
    # The message a streamed reply was previewed in: delivering this chunk edits it.
    edit_of: str | None = None


@dataclass(frozen=True)
class Delivery:
    """One chunk of a stored reply and whether the platform has it."""

    inbound_id: int  # the message it answers (the last of its batch)
    chunk: int  # position in the reply
    text: str
    entities: tuple[dict[str, Any], ...]
    status: str  # pending | sent | failed
    # Once sent: the platform's message. While pending: the preview to edit, if any.
    platform_message_id: str | None = None


@dataclass(frozen=True)
class ObservedMessage:
    """A group message not addressed to the bot, kept as room context (docs/groups.md)."""

    platform: str
    chat_key: str
    message_id: str
    sender_id: str | None
    sender_name: str | None
    text: str
    received_at: float


@dataclass(frozen=True)
class SearchHit:
    session_id: str
    chat_key: str
    seq: int
    role: str
    snippet: str
    created_at: float
