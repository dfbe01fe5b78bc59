"""Chats as conversations: live session, agent, one turn, persisted in one transaction."""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.agent import Agent
from agent.attachments.files import AttachmentFiles
from agent.context_engine import ContextEngine, EngineFactory
from agent.providers.base import Provider
from agent.tokens import CHARS_PER_TOKEN, estimate_text, over_share
from agent.tools.budget import RETENTION_S, OutputBudget, chat_directory
from agent.tools.registry import ToolRegistry, plugin_tools
from agent.turns import (
    AgentSettings,
    ModelLimits,
    ReplyStream,
    TurnFailed,
    TurnResult,
)
from agent.usage import UsageEntry
from gateway.delivery.outbound import Outgoing
from gateway.metrics import Metrics
from gateway.turns.chat_settings import PerChat
from gateway.turns.chat_tools import chat_tools
from gateway.turns.compacting import Compacting
from gateway.turns.groups import RoomContext
from gateway.turns.pricing import Price
from gateway.turns.speakers import user_message
from gateway.turns.spending import Budgets, Payer, chat_ident
from gateway.turns.turn_records import (
    Committed,
    Prepared,
    compaction_record,
    new_message,
    out_chunks,
    pending,
    usage_records,
)
from platforms.base import ChatRef, Chunk
from storage.base import SessionStore
from storage.errors import ContinuationConflict, InboundChanged
from storage.models import InboundRecord, OutChunk, SessionRecord, TurnRecord, UsageRecord

if TYPE_CHECKING:
    from gateway.mcp.hub import McpHub  # loaded only where MCP servers are configured

log = logging.getLogger(__name__)

MAX_MESSAGE_SHARE = 0.5  # a single message may fill at most half of the model's window
NO_TEXT = "(the model returned no text)"


class NothingLeft(Exception):
    """Every message of a batch was finished while it waited (its author deleted it)."""


class Conversations(Compacting):
    """Everything the gateway does to a chat's history, in the chat's worker."""

    def __init__(self, store: SessionStore, *, provider: Provider,
                 summary_provider: Provider | None, engine_factory: EngineFactory,
                 system_prompt: str, settings: AgentSettings, max_agents: int = 1024,
                 prices: Mapping[str, Price] | None = None, metrics: Metrics | None = None,
                 tool_dir: Path | None = None, files: AttachmentFiles | None = None,
                 room: RoomContext | None = None, chats: PerChat | None = None,
                 providers: Mapping[str, Provider] | None = None,
                 budgets: Budgets | None = None, mcp: McpHub | None = None) -> None:
        self.budgets = budgets  # spending limits; None: spend is not counted
        self.store = store
        self.mcp = mcp  # tools from MCP servers (docs/mcp.md); None: none configured
        self.chats = chats or PerChat()  # a chat's own settings (`chats:`)
        self.providers = dict(providers or {})  # the chats' own models, by name
        self.room = room  # group messages kept unaddressed, shown with the next mention
        self.files = files  # attachments, a directory per chat
        self.plugin_tools = plugin_tools()  # loaded once; each chat's registry holds them
        self.tool_dir = tool_dir  # saved tool outputs, a directory per chat
        self.tool_shelf = store.shelf("tool_outputs", RETENTION_S)  # shared
        self.metrics = metrics or Metrics()
        self.prices: Mapping[str, Price] = dict(prices or {})  # by model, for /usage
        self.provider = provider
        self.summary_provider = summary_provider or provider
        self.engine_factory = engine_factory
        self.system_prompt = system_prompt
        self.settings = settings
        self.limits = ModelLimits()
        self._agents: OrderedDict[str, tuple[str, Agent]] = OrderedDict()
        self._max_agents = max_agents

    def _tools(self, chat_key: str, engine: ContextEngine, budget: OutputBudget | None
               ) -> ToolRegistry | None:
        """What this chat's model may call: none on the local model (it has no tool use)."""
        if self.provider_for(chat_key).kind == "local":
            return None
        return chat_tools(self.store, chat_key, engine, budget, self.plugin_tools,
                          [self.mcp.source(chat_key)] if self.mcp is not None else [])

    def provider_for(self, chat_key: str) -> Provider:
        """The chat's own model (`chats:`), else the configured one."""
        model = self.chats.get(chat_key, "model")
        return self.providers.get(model, self.provider) if model else self.provider

    def _prompt(self, chat_key: str) -> str:
        return self.chats.get(chat_key, "system_prompt") or self.system_prompt

    async def start(self) -> None:
        """Start the MCP servers (their tools join as each is ready)."""
        if self.mcp is not None:
            await self.mcp.start()

    def log_startup(self) -> None:
        """One line: is the conversation prefix cached, for which model, for how long."""
        settings = self.provider.settings
        if settings.cache_ttl:
            log.info("prompt caching: on for %s (%s), ttl %s", settings.model,
                     settings.provider, settings.cache_ttl)
        else:
            log.info("prompt caching: off for %s (%s): only Claude models are cached",
                     settings.model, settings.provider)

    async def aclose(self) -> None:
        await self.provider.aclose()
        if self.summary_provider is not self.provider:
            await self.summary_provider.aclose()
        for own in self.providers.values():  # the chats' own models
            await own.aclose()
        if self.budgets is not None and self.budgets.fallback is not None:
            await self.budgets.fallback.aclose()
        if self.mcp is not None:  # after the drain: no turn still calls its tools
            await self.mcp.stop()

    def _window(self) -> int:
        return min(self.provider.context_length,
                   self.limits.windows.get(self.provider.model, self.provider.context_length))

    def message_room(self) -> int:
        """About how many characters one message (a document included) may fill."""
        return int(self._window() * MAX_MESSAGE_SHARE * CHARS_PER_TOKEN)

    def too_long(self, text: str) -> str | None:
        """Why a new message cannot be answered for its size, or None when it fits."""
        if not over_share(estimate_text(text), self._window(), MAX_MESSAGE_SHARE):
            return None
        return (f"That message is too long for this model ({len(text):,} characters; "
                f"about {self.message_room():,} fit). Please send it in smaller parts.")

    # --- sessions and agents ------------------------------------------------------------
    async def live_session(self, chat_key: str) -> SessionRecord:
        """The chat's live session; a new root, made atomically, when it has none. No
        store call while the store remembers the chat; one (a write) when it does not."""
        prompt = self._prompt(chat_key)
        return await self.store.open_session(
            chat_key, model=self.provider_for(chat_key).model, system_prompt=prompt,
            system_message=new_message({"role": "system", "content": prompt}))

    async def _load_agent(self, session: SessionRecord) -> Agent:
        budget = (OutputBudget(chat_directory(self.tool_dir, session.chat_key),
                               self.provider.context_length, self.tool_shelf)
                  if self.tool_dir else None)
        agent = Agent.create(self.provider_for(session.chat_key), self.engine_factory,
                             self.settings,
                             summary_provider=self.summary_provider, limits=self.limits,
                             tools=lambda engine: self._tools(session.chat_key, engine, budget),
                             budget=budget, files=self.files)
        prompt = self._prompt(session.chat_key)
        if session.kind == "root" and session.message_count == 1 \
                and session.system_prompt == prompt:
            history = [{"role": "system", "content": prompt}]  # just what we wrote in it
        else:
            history = [m.message for m in await self.store.load_history(session.id)]
        agent.load(history, session.engine_state)
        return agent

    async def agent_for(self, chat_key: str, session: SessionRecord | None = None
                        ) -> tuple[SessionRecord, Agent]:
        """The chat's live session and its agent, rebuilt from the store when not cached."""
        session = session or await self.live_session(chat_key)
        cached = self._agents.get(chat_key)
        if cached and cached[0] == session.id:
            self._agents.move_to_end(chat_key)
            return session, cached[1]
        agent = await self._load_agent(session)
        agent.session_started(session.id)
        self._remember(chat_key, session.id, agent)
        return session, agent

    async def view(self, chat_key: str) -> tuple[SessionRecord, Agent]:
        """Session and agent for reading only (/status, /usage): from outside the chat's
        worker nothing is cached, so a half-built agent never replaces the worker's."""
        session = await self.live_session(chat_key)
        cached = self._agents.get(chat_key)
        if cached and cached[0] == session.id:
            return session, cached[1]
        return session, await self._load_agent(session)

    def _remember(self, chat_key: str, session_id: str, agent: Agent) -> None:
        self._agents[chat_key] = (session_id, agent)
        self._agents.move_to_end(chat_key)
        while len(self._agents) > self._max_agents:
            self._agents.popitem(last=False)  # evicted agents are rebuilt from the store

    def forget(self, chat_key: str) -> None:
        self._agents.pop(chat_key, None)

    def moved(self, chat_key: str) -> None:
        """The chat came to this process or left it (turns/cluster.py): nothing cached of
        it is trusted, since another process may have answered it meanwhile."""
        self.forget(chat_key)
        self.store.forget_chat(chat_key)

    def book(self, chat_key: str, entries: Sequence[UsageEntry], payer: Payer | None
             ) -> tuple[UsageRecord, ...]:
        """Usage as store rows: priced and counted against the payer's budgets, or (work
        no user asked for, e.g. `threadline compress`) against the chat's."""
        if payer is None and self.budgets is not None:
            payer = self.budgets.payer(chat_ident(chat_key), None)
        return payer.book(entries) if payer is not None else usage_records(entries)

    # --- a turn: prepare (the model's part, stoppable), then commit ------------------------
    async def prepare(self, chat: ChatRef, records: list[InboundRecord],
                      stream: ReplyStream | None = None,
                      parts: Mapping[int, list[dict[str, Any]]] | None = None,
                      payer: Payer | None = None, model: Provider | None = None) -> Prepared:
        """Store the inbound messages (with the attachment `parts` read for them, by
        inbound id), run hygiene and the model turn (its answer shown on `stream` while
        written); write no reply yet.

        Cancelling this (a /stop) leaves the store consistent: what it wrote is complete,
        and the caller forgets the agent so the next turn rebuilds it from the store.
        """
        if self.mcp is not None:  # an admin's DMs see MCP tools by default
            self.mcp.note(chat, (r.sender_id for r in records))
        session, agent = await self._take(chat.key, records, parts or {})
        ids = tuple(r.id for r in records)
        reply_to = records[-1].message_id
        session, notices = await self._hygiene(chat, session, agent, payer)
        base = Prepared(chat.key, session, agent, ids, reply_to, tuple(notices), payer=payer)
        try:  # `model`: this turn on another model (past a budget, docs/budgets.md)
            turn = agent.run_turn(stream, models=model) if model else agent.run_turn(stream)
            return replace(base, result=await turn)
        except TurnFailed as failed:
            return replace(base, failure=failed)

    async def commit(self, prepared: Prepared, render: Callable[[str], Awaitable[list[Chunk]]],
                     previews: Sequence[str] = ()) -> Committed:
        """Persist the prepared turn in one transaction, the reply's chunks (as `render`
        makes them for the platform) recorded as pending deliveries, each replacing the
        streamed preview at its position if there is one; return what to send."""
        if prepared.failure is not None:
            await self.store.record_turn(prepared.session.id, TurnRecord(
                failed=prepared.inbound_ids, release_hold=_hold(prepared.payer),
                usage=self.book(prepared.chat_key, prepared.failure.usage, prepared.payer)))
            failure = Outgoing(prepared.failure.user_message, prepared.reply_to)
            return Committed(prepared.notices, (), (), failure)
        result = prepared.result
        assert result is not None
        chunks = out_chunks(await render(result.reply if result.reply.strip() else NO_TEXT),
                            previews)
        await self._persist_turn(prepared, result, chunks)
        return Committed(prepared.notices, pending(prepared.inbound_ids[-1], chunks),
                         tuple(Outgoing(n) for n in result.notices))

    async def charge(self, prepared: Prepared) -> None:
        """Book a prepared turn's model calls without storing the turn (it was dropped:
        another process answers its messages), releasing its hold."""
        entries = (prepared.failure.usage if prepared.failure is not None
                   else prepared.result.usage if prepared.result is not None else ())
        await self.store.record_turn(prepared.session.id, TurnRecord(
            usage=self.book(prepared.chat_key, entries, prepared.payer),
            release_hold=_hold(prepared.payer)))

    async def commit_partial(self, chat_key: str, records: list[InboundRecord], text: str,
                             render: Callable[[str], Awaitable[list[Chunk]]],
                             previews: Sequence[str]
                             ) -> Committed:
        """Store a reply /stop cut short as it stays on screen (`text`, already marked),
        answering `records`; the half-turn agent is forgotten and rebuilt from the store."""
        self.forget(chat_key)
        session = await self.live_session(chat_key)
        ids = tuple(r.id for r in records)
        chunks = out_chunks(await render(text), previews)
        await self.store.record_turn(session.id, TurnRecord(
            after=(new_message({"role": "assistant", "content": text}),), replied=ids,
            delivery=chunks))
        return Committed((), pending(ids[-1], chunks), ())

    async def abandon(self, chat_key: str, records: list[InboundRecord], *,
                      failed: bool) -> None:
        """A turn cancelled before its commit: forget the half-turn agent; after a /stop
        the messages stay stored, unanswered, and their ledger rows fail."""
        self.forget(chat_key)
        if failed:
            await self.store.finish_inbound([r.id for r in records], "failed")

    async def _take(self, chat_key: str, records: list[InboundRecord],
                    parts: Mapping[int, list[dict[str, Any]]]) -> tuple[SessionRecord, Agent]:
        """Move pending inbound messages into the live session (and the agent's transcript).
        Taken as read; a row edited or deleted by its author while it waited is read again."""
        try:
            return await self._take_as_read(chat_key, records, parts, checked=True)
        except InboundChanged:
            records = await self.store.inbound([r.id for r in records])  # edits applied
            if not any(r.status in ("pending", "taken") for r in records):
                raise NothingLeft from None  # deleted by their authors while they waited
            return await self._take_as_read(chat_key, records, parts, checked=False)

    async def _take_as_read(self, chat_key: str, records: list[InboundRecord],
                            parts: Mapping[int, list[dict[str, Any]]], *,
                            checked: bool) -> tuple[SessionRecord, Agent]:
        pending = [r for r in records if r.status == "pending"]
        messages = [user_message(r, parts.get(r.id, ())) for r in pending]
        room = await self.room.block(chat_key, pending) if self.room and pending else None
        messages = [room, *messages] if room is not None else messages
        session, agent = await self.agent_for(chat_key)
        if not pending:
            return session, agent
        ids, texts = [r.id for r in pending], [r.text for r in pending] if checked else None
        try:
            await self.store.take_inbound(ids, session.id, messages, texts)
        except ContinuationConflict:
            # Another process (`threadline compress`) continued this session: use the tip.
            self.forget(chat_key)
            session, agent = await self.agent_for(chat_key)
            await self.store.take_inbound(ids, session.id, messages, texts)
        agent.append([m.message for m in messages])
        return session, agent

    async def _persist_turn(self, prepared: Prepared, result: TurnResult,
                            delivery: tuple[OutChunk, ...]) -> None:
        chat_key, session, agent = prepared.chat_key, prepared.session, prepared.agent
        state = agent.export_state()
        compaction = (compaction_record(result.compaction, state)
                      if result.compaction is not None else None)
        turn = TurnRecord(before=tuple(new_message(m) for m in result.before),
                          compaction=compaction,
                          after=tuple(new_message(m) for m in result.after),
                          replied=prepared.inbound_ids, release_hold=_hold(prepared.payer),
                          usage=self.book(chat_key, result.usage, prepared.payer),
                          engine_state=state, last_prompt_tokens=agent.status().last_prompt_tokens,
                          delivery=delivery)
        try:
            live = await self.store.record_turn(session.id, turn)
        except ContinuationConflict:
            # Another process compacted this session first: keep its chain, add our reply.
            log.warning("chat %s: session %s was continued elsewhere; appending to the tip",
                        chat_key, session.id)
            self.forget(chat_key)
            tip = await self.live_session(chat_key)
            await self.store.record_turn(tip.id, TurnRecord(
                after=(*turn.before, *turn.after), replied=turn.replied, usage=turn.usage,
                release_hold=turn.release_hold,
                delivery=delivery))
            return
        if result.compaction is not None:
            self.metrics.compactions.labels("automatic").inc()
        if live.id != session.id:
            agent.session_started(live.id, parent_session_id=session.id)
        self._remember(chat_key, live.id, agent)

    async def end_session(self, chat_key: str, reason: str, *,
                          session_id: str | None = None) -> bool:
        """End the chat's live session (/new: "reset"; "idle", "daily"); the next message
        starts a root session. With `session_id`, only if that one is still live.

        The context engine hears of it (on_session_end) with the whole transcript, also
        when the agent was not in memory. False when there was nothing to end.
        """
        session = await self.store.live_session(chat_key)
        if session is None or (session_id is not None and session.id != session_id):
            return False
        _, agent = await self.agent_for(chat_key, session)
        agent.session_ended(session.id)
        await self.store.end_session(session.id, reason)
        self.forget(chat_key)
        return True


def _hold(payer: Payer | None) -> str | None:
    return payer.hold if payer is not None else None
