"""Before a turn: may its senders, its chat and the bot still spend? (docs/budgets.md)

A sender past a limit hears one sentence and their messages leave the batch, with no
model call; or, with `budgets.on_limit: fallback`, the turn runs on the fallback model and
the chat is told so once per period. Everyone else's messages go on as usual.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from agent.providers.base import Provider
from agent.tokens import estimate_text
from gateway.auth import Authorizer
from gateway.delivery.outbound import Outbound
from gateway.turns.conversations import Conversations
from gateway.turns.pricing import cost
from gateway.turns.spending import Budgets, Payer, Reached, chat_ident
from platforms.base import ChatRef
from storage.base import SessionStore
from storage.models import InboundRecord, TokenCounts

log = logging.getLogger(__name__)


class SpendGate:
    def __init__(self, budgets: Budgets, conversations: Conversations, auth: Authorizer,
                 store: SessionStore, outbound: Outbound) -> None:
        self.budgets = budgets
        self.conversations = conversations
        self.auth = auth
        self.store = store
        self.outbound = outbound
        self.fallback = budgets.fallback  # budgets.fallback_model (on_limit: fallback)

    async def admit(self, chat: ChatRef, records: list[InboundRecord]
                    ) -> tuple[list[InboundRecord], Payer | None, Provider | None]:
        """(the messages to answer, whose budgets pay, the model to run on if not the
        chat's own). The refused are answered and finished here."""
        if not self.budgets.config.any:
            return records, None, None
        usd, tokens = await self._estimate(chat.key, records)
        keep, payer, model = list(records), None, None
        for user in _senders(records):
            admin = user is not None and self.auth.configured_admin(*user.split(":", 1))
            found, reached = await self.budgets.admit(chat_ident(chat.key), user, admin=admin,
                                                      usd=usd, tokens=tokens)
            if reached is None:
                await self.budgets.release(payer)  # one hold per turn: the last sender's
                payer = found
                continue
            if self.fallback is not None:
                if not reached.busy:
                    await self._tell_once(chat, reached)
                payer, model = found, self.fallback
                continue
            everyone = reached.scope != "user"
            gone = [r for r in keep if everyone or _user(r) == user]
            await self._refuse(chat, gone, reached)
            keep = [r for r in keep if r not in gone]
        if not keep:
            await self.budgets.release(payer)
            return [], None, None
        return keep, payer, model

    async def _estimate(self, chat_key: str, records: Sequence[InboundRecord]
                        ) -> tuple[float, int]:
        session = await self.conversations.live_session(chat_key)
        provider = self.conversations.provider_for(chat_key)
        # A turn's likely size: the last prompt and the new text read, the longest reply.
        guess = TokenCounts(
            input_tokens=(session.last_prompt_tokens or 0)
            + sum(estimate_text(r.text) for r in records),
            output_tokens=self.conversations.settings.max_output_tokens)
        price = self.budgets.prices.get(provider.model)
        return (cost(guess, price) if price else 0.0), guess.input_tokens + guess.output_tokens

    async def _refuse(self, chat: ChatRef, records: list[InboundRecord],
                      reached: Reached) -> None:
        if not records:
            return
        sentence = reached.sentence(self.budgets.clock())
        await self.store.finish_inbound([r.id for r in records], "answered")
        await self.outbound.send(chat, sentence, records[-1].message_id)
        await self.outbound.delivered(chat, tuple(r.message_id for r in records))

    async def _tell_once(self, chat: ChatRef, reached: Reached) -> None:
        """Past a limit on the fallback model: said once per limit and period."""
        now = self.budgets.clock()
        key = (f"budget-fallback-said:{chat_ident(chat.key)}:{reached.scope}:"
               f"{self.budgets.suffix(reached.period, now)}")
        if await self.store.get_setting(key):
            return
        await self.store.put_setting(key, "1")
        assert self.fallback is not None
        await self.outbound.send(chat, reached.sentence(now, instead=self.fallback.model))


def _user(record: InboundRecord) -> str | None:
    return f"{record.platform}:{record.sender_id}" if record.sender_id else None


def _senders(records: Sequence[InboundRecord]) -> list[str | None]:
    """Distinct senders, the one who wrote last last (their turn it is)."""
    order: dict[str | None, int] = {}
    for i, record in enumerate(records):
        order[_user(record)] = i
    return sorted(order, key=order.__getitem__)


async def admit(gate: SpendGate | None, chat: ChatRef, records: list[InboundRecord]
                ) -> tuple[list[InboundRecord], Payer | None, Provider | None]:
    """`SpendGate.admit`, or everything as it is where no budgets are kept."""
    return await gate.admit(chat, records) if gate is not None else (records, None, None)


async def release(gate: SpendGate | None, payer: Payer | None) -> None:
    """Let go of a turn's hold now, when nothing will book it."""
    if gate is not None:
        await gate.budgets.release(payer)
