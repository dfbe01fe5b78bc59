"""Chat commands: one table of name → handler, who may run it, and when it runs.

Adding a command is one `Command(...)` entry in `BUILTIN`: /help, the platforms' command
menus, access checks and ordering all follow from it. A command never reaches the model
(/compress asks the summary model, through the context engine).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, fields
from typing import Any, Literal, TypeVar

from gateway.auth import Authorizer
from gateway.turns.conversations import Conversations
from gateway.turns.jobs import Running, Stopped
from gateway.turns.pricing import cost_line, estimate
from gateway.turns.spending import chat_ident, standing_lines
from platforms.base import InboundMessage
from storage.base import SessionStore
from storage.models import UsageTotals

T = TypeVar("T")
Access = Literal["allowed", "manage"]  # manage: the user in a DM, admins in a group

_COMMAND = re.compile(r"^/([A-Za-z0-9_]{1,32})(?:@(\w+))?(?:\s+(.*))?$", re.DOTALL)


@dataclass(frozen=True)
class Invocation:
    """A message that is a command: `/name@bot args`."""

    name: str
    args: str
    bot: str | None = None


def parse_command(text: str) -> Invocation | None:
    """`/cmd`, `/cmd@bot args`, any case; text like `/usr/bin` is not a command."""
    match = _COMMAND.match(text.strip())
    if not match:
        return None
    return Invocation(match.group(1).lower(), (match.group(3) or "").strip(), match.group(2))


class Refusal(str):
    """A command's answer that refuses the asker: said to them alone where the platform
    can (an ephemeral Discord reply), like any other answer elsewhere."""

    __slots__ = ()


@dataclass(frozen=True)
class CommandCall:
    """What a handler gets: the message, its arguments, and the gateway's parts."""

    msg: InboundMessage
    args: str
    conversations: Conversations
    store: SessionStore
    auth: Authorizer
    table: CommandTable
    running: Running | None  # the chat's running batch, if any (for /stop)
    # Runs model work that /stop may cancel (raising Stopped) in a serial command.
    stoppable: Callable[[Awaitable[Any]], Awaitable[Any]]
    # The event loop's worst stall lately, in seconds (/status shows admins).
    pulse: Callable[[], float] | None = None
    # Platforms not receiving now, a line each (/status shows admins).
    platforms_down: Callable[[], list[str]] = list


Handler = Callable[[CommandCall], Awaitable[str]]


@dataclass(frozen=True)
class Command:
    name: str
    summary: str  # one line for /help and the platforms' command menus
    run: Handler
    access: Access = "allowed"
    # Runs in the chat's order, after the turns before it, so answers keep the order of what
    # was asked. Only /stop does not: it acts on the turn running now.
    serial: bool = True
    aliases: tuple[str, ...] = ()
    listed: bool = True


class CommandTable:
    """The commands one gateway knows, by name and alias."""

    def __init__(self, commands: Iterable[Command] = ()) -> None:
        self._commands: dict[str, Command] = {}
        self._names: dict[str, Command] = {}
        for command in commands:
            self.add(command)

    def add(self, command: Command) -> None:
        for name in (command.name, *command.aliases):
            if name in self._names:
                raise ValueError(f"command /{name} is already defined")
        self._commands[command.name] = command
        for name in (command.name, *command.aliases):
            self._names[name] = command

    def find(self, name: str) -> Command | None:
        return self._names.get(name.lower())

    def menu(self) -> list[tuple[str, str]]:
        """(name, summary) of the listed commands, for /help and setMyCommands."""
        return [(c.name, c.summary) for c in self._commands.values() if c.listed]

    def help_text(self) -> str:
        rows = "\n".join(f"/{name} - {what}" for name, what in self.menu())
        return f"Commands:\n{rows}"


# --- the built-in commands ------------------------------------------------------------------
async def _help(call: CommandCall) -> str:
    return call.table.help_text()


async def _start(call: CommandCall) -> str:
    return ("Hi, I'm Threadline: a chat assistant that keeps the thread of long "
            "conversations by condensing old turns instead of forgetting them.\n"
            + call.table.help_text())


async def _new(call: CommandCall) -> str:
    await call.conversations.end_session(call.msg.chat_key, "reset")
    return "Started a fresh conversation. The old one stays stored."


NO_CONVERSATION = "There is no conversation here yet, so nothing to compress."


async def _compress(call: CommandCall) -> str:
    chat_key = call.msg.chat_key
    try:
        prepared = await call.stoppable(
            call.conversations.prepare_compaction(chat_key, call.args or None))
    except Stopped:
        call.conversations.forget(chat_key)  # the engine may be half-way: rebuild it
        return "Stopped: the conversation was not compressed."
    return await finish_compress(call.conversations, chat_key, prepared)


async def finish_compress(conversations: Conversations, chat_key: str,
                          prepared: Any) -> str:
    """Store a prepared manual compaction and say what it did (also the shell command)."""
    if prepared is None:
        return NO_CONVERSATION
    result, session, agent = prepared
    await conversations.persist_compaction(chat_key, session, agent, result)
    return result.feedback().render()


def _n(value: int) -> str:
    return f"{value:,}"


async def _status(call: CommandCall) -> str:
    session, agent = await call.conversations.view(call.msg.chat_key)
    status = agent.status()
    return "\n".join([
        f"Model: {agent.provider.model} ({agent.provider.kind})",
        f"Context: {_n(status.last_prompt_tokens)} / {_n(status.context_length)} tokens "
        f"({status.usage_percent:.0f}%)",
        f"Compactions: {status.compression_count}",
        f"Session: {session.id}",
        *filter(None, [call.conversations.chats.describe(call.msg.chat_key)]),
        *(await _admin_lines(call)),
    ])


async def _admin_lines(call: CommandCall) -> list[str]:
    """What /status tells admins about the gateway itself."""
    if not await call.auth.is_admin(call.msg):
        return []
    lines = [f"Platform {line}" for line in call.platforms_down()]
    if call.pulse is not None:
        lines.append(f"Event loop: largest stall {call.pulse() * 1000:,.0f} ms "
                     "in the last minute")
    return lines


def _summed(parts: list[UsageTotals]) -> UsageTotals:
    return UsageTotals(**{f.name: sum(getattr(p, f.name) for p in parts)
                          for f in fields(UsageTotals)})


def _hit_rate(totals: UsageTotals) -> str:
    """Cache reads as a share of everything the model read (input + cache read + write)."""
    prompt = totals.input_tokens + totals.cache_read_tokens + totals.cache_write_tokens
    return f"{100 * totals.cache_read_tokens / prompt:.1f}%" if prompt else "n/a"


async def _usage(call: CommandCall) -> str:
    session, agent = await call.conversations.view(call.msg.chat_key)
    # One read, split by model: the totals and the cost always describe the same calls.
    by_model = await call.store.usage_by_model(session.id)
    totals = _summed(list(by_model.values()))
    status = agent.status()
    model = agent.provider.model
    return "\n".join([
        "Usage in this conversation (since the last /new, compactions included):",
        f"Input: {_n(totals.input_tokens)}",
        f"Cache read: {_n(totals.cache_read_tokens)}",
        f"Cache write: {_n(totals.cache_write_tokens)}",
        f"Output: {_n(totals.output_tokens)}",
        f"Reasoning: {_n(totals.reasoning_tokens)} (part of output)",
        f"Calls: {_n(totals.calls)}",
        f"Cache hit rate: {_hit_rate(totals)}",
        # The last call's prompt, never a running total: what the next call starts from.
        f"Context fill: {_n(status.last_prompt_tokens)} / {_n(status.context_length)} "
        f"({status.usage_percent:.0f}%)",
        cost_line(estimate(by_model, call.conversations.prices, model), model),
        *await _budget_lines(call),
    ])


async def _budget_lines(call: CommandCall) -> list[str]:
    """Spent of each limit: the user's and the chat's, and the bot's for admins."""
    budgets = call.conversations.budgets
    if budgets is None or not budgets.config.any:
        return []
    msg = call.msg
    rows = await budgets.standing(chat_ident(msg.chat_key), f"{msg.platform}:{msg.user_id}",
                                  admin=await call.auth.is_admin(msg))
    return standing_lines(rows)


async def _stop(call: CommandCall) -> str:
    """The sender of the running turn or an admin (anyone allowed, in a DM)."""
    running, msg = call.running, call.msg
    if running is None:
        return "Nothing to stop."
    if msg.is_group and not (msg.user_id in running.senders() or await call.auth.is_admin(msg)):
        return Refusal("Only an admin or the person who asked can /stop this here.")
    if running.stop("stop"):
        return "Stopping."
    if running.stoppable is not None:
        return "Too late to stop: the answer is already on its way."
    return "Nothing to stop."


BUILTIN: tuple[Command, ...] = (
    Command("help", "list the commands", _help),
    Command("new", "end this conversation and start a fresh one", _new, access="manage",
            serial=True, aliases=("reset",)),
    Command("compress", "condense the conversation now; /compress <topic> keeps that topic "
            "in detail", _compress, access="manage", serial=True),
    Command("usage", "tokens used in this conversation (since the last /new)", _usage,
            access="manage"),
    Command("status", "model, context fill, compactions, session", _status),
    Command("stop", "cancel the answer being written", _stop, serial=False),
    Command("start", "what this bot does", _start, listed=False),
)


def default_commands() -> CommandTable:
    return CommandTable(BUILTIN)
