"""Compaction outside a model turn: hygiene before a turn, /compress and `threadline
compress`; each persisted as a continuation (docs/architecture.md, "Compaction")."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from agent.agent import Agent
from agent.turns import CompactResult
from gateway.delivery.outbound import Outgoing
from gateway.metrics import Metrics
from gateway.turns.hygiene import needs_hygiene
from gateway.turns.turn_records import compaction_record
from platforms.base import ChatRef
from storage.base import SessionStore
from storage.errors import ContinuationConflict
from storage.models import SessionRecord, TurnRecord

if TYPE_CHECKING:
    from gateway.turns.spending import Payer

log = logging.getLogger(__name__)


class Compacting:
    """Part of Conversations (gateway/turns/conversations.py), which provides the store, the
    metrics and the agents (`agent_for`, `forget`, `_remember`, `live_session`), and
    prices usage (`book`)."""

    store: SessionStore
    metrics: Metrics

    async def _hygiene(self, chat: ChatRef, session: SessionRecord, agent: Agent,
                       payer: Payer | None = None) -> tuple[SessionRecord, list[Outgoing]]:
        if not needs_hygiene(agent):
            return session, []
        log.info("chat %s: session %s is past 85%% of the window; compacting first",
                 chat.key, session.id)
        result = await agent.compact(force=False)
        live = await self.persist_compaction(chat.key, session, agent, result,
                                             trigger="hygiene", payer=payer)
        return live, [Outgoing(notice) for notice in result.notices]

    async def persist_compaction(self, chat_key: str, session: SessionRecord, agent: Agent,
                                 result: CompactResult, trigger: str = "manual",
                                 payer: Payer | None = None) -> SessionRecord:
        if result.compaction is None and result.report is None and not result.usage:
            return session  # nothing happened that the store needs to know
        report = result.report
        if result.compaction is not None:
            self.metrics.compactions.labels(trigger).inc()
        elif report is not None and (report.outcome == "aborted" or report.error):
            self.metrics.compactions.labels("failed").inc()
        state = agent.export_state()
        usage = self.book(chat_key, result.usage, payer)
        if result.compaction is None:
            await self.store.record_turn(session.id, TurnRecord(usage=usage, engine_state=state))
            return session
        try:
            live = await self.store.record_turn(session.id, TurnRecord(
                compaction=compaction_record(result.compaction, state), usage=usage,
                engine_state=state))
        except ContinuationConflict:
            log.warning("chat %s: compaction raced another; keeping the existing chain",
                        chat_key)
            self.forget(chat_key)
            return await self.live_session(chat_key)
        agent.session_started(live.id, parent_session_id=session.id)
        self._remember(chat_key, live.id, agent)
        return live

    async def prepare_compaction(self, chat_key: str, focus: str | None = None
                                 ) -> tuple[CompactResult, SessionRecord, Agent] | None:
        """Manual compaction's model part (/compress, `threadline compress`); None when the
        chat has no conversation. Nothing is stored until `persist_compaction`."""
        session = await self.store.live_session(chat_key)
        if session is None:
            return None
        session, agent = await self.agent_for(chat_key, session)
        if not agent.has_content_to_compress():
            before = tuple(agent.messages)
            return CompactResult(before=before, compaction=None), session, agent
        return await agent.compact(focus, force=True), session, agent

    async def compact(self, chat_key: str, focus: str | None = None) -> CompactResult | None:
        """Manual compaction, prepared and persisted in one go (the shell command)."""
        prepared = await self.prepare_compaction(chat_key, focus)
        if prepared is None:
            return None
        result, session, agent = prepared
        await self.persist_compaction(chat_key, session, agent, result)
        return result

