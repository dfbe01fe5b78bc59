"""Slash commands: parsed here, answered without ever reaching the LLM (except /compress)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from agent.agent import Agent, CompactResult
from agent.feedback import build_feedback
from agent.tokens import estimate_message
from gateway.conversation import Conversations
from storage.base import SessionStore
from storage.models import SessionRecord

COMMANDS: list[tuple[str, str]] = [
    ("help", "list the commands"),
    ("new", "end this conversation and start a fresh one"),
    ("compress", "condense the conversation now; /compress <topic> keeps that topic in detail"),
    ("usage", "tokens used in this chat, over its whole history"),
    ("status", "model, context fill, compactions, session"),
    ("stop", "cancel the answer being written"),
]
ALIASES = {"reset": "new", "start": "start"}
KNOWN = {name for name, _ in COMMANDS} | set(ALIASES)
SERIAL = {"new", "compress"}  # change the session: run in the chat's order, after its turns
MANAGE = {"new", "compress", "usage"}  # DM: the user; group: admins

_COMMAND = re.compile(r"^/([A-Za-z0-9_]{1,32})(?:@(\w+))?(?:\s+(.*))?$", re.DOTALL)


@dataclass(frozen=True)
class Command:
    name: str
    args: str
    bot: str | None = None


def parse_command(text: str) -> Command | None:
    """`/cmd`, `/cmd@bot args`, any case; text like `/usr/bin` is not a command."""
    match = _COMMAND.match(text.strip())
    if not match:
        return None
    name = match.group(1).lower()
    return Command(ALIASES.get(name, name), (match.group(3) or "").strip(), match.group(2))


def help_text() -> str:
    rows = "\n".join(f"/{name} - {what}" for name, what in COMMANDS)
    return f"Commands:\n{rows}"


def start_text() -> str:
    return ("Hi, I'm Threadline: a chat assistant that keeps the thread of long "
            "conversations by condensing old turns instead of forgetting them.\n" + help_text())


def _n(value: int) -> str:
    return f"{value:,}"


async def status_text(conversations: Conversations, chat_key: str) -> str:
    session, agent = await conversations.view(chat_key)
    status = agent.engine.get_status()
    return "\n".join([
        f"Model: {agent.provider.model} ({agent.provider.kind})",
        f"Context: {_n(status.last_prompt_tokens)} / {_n(status.context_length)} tokens "
        f"({status.usage_percent:.0f}%)",
        f"Compactions: {status.compression_count}",
        f"Session: {session.id}",
    ])


async def usage_text(conversations: Conversations, store: SessionStore, chat_key: str) -> str:
    session, agent = await conversations.view(chat_key)
    totals = await store.usage_totals(session.id)
    status = agent.engine.get_status()
    return "\n".join([
        "Usage over this chat's whole history:",
        f"Input: {_n(totals.input_tokens)}",
        f"Cache read: {_n(totals.cache_read_tokens)}",
        f"Cache write: {_n(totals.cache_write_tokens)}",
        f"Output: {_n(totals.output_tokens)}",
        f"Reasoning: {_n(totals.reasoning_tokens)}",
        f"Calls: {_n(totals.calls)}",
        f"Context fill: {_n(status.last_prompt_tokens)} / {_n(status.context_length)} "
        f"({status.usage_percent:.0f}%)",
        "Cost: no prices configured for this model",
    ])


NO_CONVERSATION = "There is no conversation here yet, so nothing to compress."


async def finish_compress(conversations: Conversations, chat_key: str,
                          prepared: tuple[CompactResult, SessionRecord, Agent] | None) -> str:
    """Store a prepared manual compaction and say what it did."""
    if prepared is None:
        return NO_CONVERSATION
    result, session, agent = prepared
    await conversations.persist_compaction(chat_key, session, agent, result)
    feedback = build_feedback(list(result.before), list(result.after), result.report,
                              lambda msgs: sum(estimate_message(m) for m in msgs))
    return feedback.render()


async def compress_text(conversations: Conversations, chat_key: str, focus: str | None) -> str:
    prepared = await conversations.prepare_compaction(chat_key, focus or None)
    return await finish_compress(conversations, chat_key, prepared)
