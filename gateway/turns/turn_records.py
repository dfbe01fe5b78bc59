"""What a turn writes and sends, as the gateway hands it between its steps: the prepared
turn, the committed one, and the store records they are made into."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agent.agent import Agent
from agent.tokens import estimate_message
from agent.turns import Compacted, TurnFailed, TurnResult
from agent.usage import UsageEntry
from gateway.delivery.outbound import Outgoing
from platforms.base import Chunk
from storage.models import (
    Compaction,
    Delivery,
    NewMessage,
    OutChunk,
    SessionRecord,
    UsageRecord,
)

if TYPE_CHECKING:
    from gateway.turns.spending import Payer


@dataclass(frozen=True)
class Committed:
    """A stored turn, ready to send: notices, the reply's chunks, then more notices."""

    before: tuple[Outgoing, ...]
    reply: tuple[Delivery, ...]  # empty when the turn failed
    after: tuple[Outgoing, ...]
    failure: Outgoing | None = None  # the sentence a failed turn answers with


@dataclass(frozen=True)
class Prepared:
    """A turn the model has answered but nothing of which is stored or sent yet."""

    chat_key: str
    session: SessionRecord
    agent: Agent
    inbound_ids: tuple[int, ...]
    reply_to: str | None
    notices: tuple[Outgoing, ...]  # from a hygiene compaction before the turn
    result: TurnResult | None = None
    failure: TurnFailed | None = None
    payer: Payer | None = None  # whose budgets the turn's usage is booked to


def new_message(message: dict[str, Any], **kw: Any) -> NewMessage:
    return NewMessage(message=message, tokens=estimate_message(message), **kw)


def usage_records(entries: Sequence[UsageEntry]) -> tuple[UsageRecord, ...]:
    """The agent's usage entries as store rows (the counts carry the same names)."""
    return tuple(UsageRecord(model=e.model, purpose=e.purpose, **vars(e.usage))
                 for e in entries)


def compaction_record(compacted: Compacted, state: dict[str, Any]) -> Compaction:
    return Compaction(messages=tuple(new_message(m) for m in compacted.messages),
                      engine_state=state, covers=compacted.covers, sources=compacted.sources)


def out_chunks(chunks: Sequence[Chunk], previews: Sequence[str]) -> tuple[OutChunk, ...]:
    return tuple(OutChunk(c.text, c.entities, previews[i] if i < len(previews) else None)
                 for i, c in enumerate(chunks))


def pending(inbound_id: int, chunks: Sequence[OutChunk]) -> tuple[Delivery, ...]:
    return tuple(Delivery(inbound_id, i, c.text, c.entities, "pending", c.edit_of)
                 for i, c in enumerate(chunks))
