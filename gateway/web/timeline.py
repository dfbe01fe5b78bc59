"""What the web pages show, computed from the store's records: pure functions, no I/O."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gateway.turns.pricing import Price, estimate
from storage.models import ChatSummary, SessionRecord, UsageTotals

SORTS = ("last", "messages", "tokens", "cost", "cache", "compactions", "chat")


@dataclass(frozen=True)
class ChatRow:
    summary: ChatSummary
    tokens: int  # input + cache + output, over every model
    cost: float | None  # USD, None when no model used has a price
    cache_rate: float | None  # cache reads over everything read, None with no reads

    @property
    def platform(self) -> str:
        return self.summary.chat_key.partition(":")[0]


def chat_row(summary: ChatSummary, prices: Mapping[str, Price]) -> ChatRow:
    usage = summary.usage.values()
    read = sum(u.input_tokens + u.cache_read_tokens + u.cache_write_tokens for u in usage)
    found = estimate(summary.usage, prices, "") if summary.usage else None
    return ChatRow(summary, read + sum(u.output_tokens for u in usage),
                   found.usd if found else None,
                   sum(u.cache_read_tokens for u in usage) / read if read else None)


def sort_rows(rows: list[ChatRow], key: str, descending: bool) -> list[ChatRow]:
    """Rows by one column; chats without a value (no price, no reads) always last."""
    values = {
        "last": lambda r: r.summary.last_at, "messages": lambda r: r.summary.messages,
        "tokens": lambda r: r.tokens, "cost": lambda r: r.cost,
        "cache": lambda r: r.cache_rate, "compactions": lambda r: r.summary.compactions,
        "chat": lambda r: r.summary.chat_key,
    }
    value = values.get(key, values["last"])
    known = [r for r in rows if value(r) is not None]
    unknown = [r for r in rows if value(r) is None]
    return sorted(known, key=value, reverse=descending) + unknown


@dataclass(frozen=True)
class Step:
    """One session of a chat's timeline, and the compaction that started it, if one did."""

    session: SessionRecord
    tokens: int  # every message it holds, by our estimate
    summary: str | None  # the handoff summary it started from (a continuation)
    before: int | None  # tokens the compacted session held
    after: int | None  # tokens it started with (the compacted transcript and its reply)


def timeline(sessions: Sequence[SessionRecord],
             tokens: Mapping[str, tuple[int, int]]) -> list[Step]:
    """A chat's sessions, oldest first; `tokens` maps a session to (all, at its start)."""
    ordered = sorted(sessions, key=lambda s: (s.started_at, s.id))
    steps = []
    for session in ordered:
        total, at_start = tokens.get(session.id, (0, 0))
        continued = session.kind == "compression"
        summary = session.engine_state.get("previous_summary") if continued else None
        parent = tokens.get(session.parent_session_id or "")
        steps.append(Step(session, total, summary if isinstance(summary, str) else None,
                          parent[0] if continued and parent else None,
                          at_start if continued else None))
    return steps


def hit_rate(totals: UsageTotals) -> float | None:
    read = totals.input_tokens + totals.cache_read_tokens + totals.cache_write_tokens
    return totals.cache_read_tokens / read if read else None
