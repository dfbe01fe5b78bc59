"""Slash commands: the command tree, its registration, and answering interactions.

Discord gives a bot 3 seconds to acknowledge an interaction. An answer ready by then (a
refusal, /help, /status) is the interaction's response, ephemeral when it refuses; work
that takes longer (/compress, /new queue behind the chat's turns) is deferred at once,
and its answer arrives as a follow-up. See docs/architecture.md, "Discord".
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import discord
from discord import app_commands

from platforms.base import Chunk

log = logging.getLogger(__name__)

DEFER_AFTER_S = 1.5  # well inside Discord's 3 s, whatever the network adds
CLOSE_EMPTY = "Nothing to say here."
RESTARTING = "I am restarting and could not get to this; please send it again in a minute."
NOT_OURS = ("That is not a command of this bot any more; type / to see the ones it has "
            "now.")
# Commands that take one free-text argument on Discord: name → (option, description).
COMMAND_OPTIONS = {"compress": ("focus", "a topic to keep in detail")}

OnCommand = Callable[[discord.Interaction, str], Awaitable[None]]


def define(tree: app_commands.CommandTree, commands: list[tuple[str, str]],
           on_command: OnCommand) -> None:
    """Put the commands in the tree (what Discord should hold)."""
    tree.clear_commands(guild=None)
    for name, summary in commands:
        tree.add_command(_command(name, summary, on_command))


def _shape(command: dict[str, object]) -> tuple[object, ...]:
    """What a user sees of a command: its name, description and options."""
    options = command.get("options") or []
    return (command.get("name"), command.get("description"),
            tuple((o.get("name"), o.get("description"), o.get("type"), bool(o.get("required")))
                  for o in options if isinstance(o, dict)))  # type: ignore[union-attr]


def same(registered: list[app_commands.AppCommand], tree: app_commands.CommandTree) -> bool:
    """Whether the commands Discord holds are the tree's (names, descriptions, options)."""
    theirs = sorted(_shape(dict(command.to_dict())) for command in registered)
    ours = sorted(_shape(command.to_dict(tree)) for command in tree.get_commands())
    return theirs == ours


async def answer_error(interaction: discord.Interaction,
                       error: app_commands.AppCommandError) -> None:
    """A command the tree does not have (removed, renamed, or an old client's copy) is
    told so privately; any other failure is logged, and the asker hears of it."""
    stale = isinstance(error, app_commands.CommandNotFound |
                       app_commands.CommandSignatureMismatch)
    if stale:
        log.info("discord: interaction for a command this bot no longer has: %s", error)
    else:
        log.error("discord: slash command %s failed: %s", interaction.command, error)
    try:
        if not interaction.response.is_done():
            await interaction.response.send_message(
                NOT_OURS if stale else "Something went wrong with that command.",
                ephemeral=True)
    except discord.HTTPException as exc:
        log.warning("discord: answering interaction %s failed: %s", interaction.id, exc)


def _command(name: str, summary: str, on_command: OnCommand) -> app_commands.Command:
    description = summary[:100]  # Discord's limit for a command description
    option = COMMAND_OPTIONS.get(name)
    if option is None:
        async def bare(interaction: discord.Interaction) -> None:
            await on_command(interaction, f"/{name}")

        return app_commands.Command(name=name, description=description, callback=bare)

    async def with_argument(interaction: discord.Interaction, value: str | None = None
                            ) -> None:
        await on_command(interaction, f"/{name} {value}".strip() if value else f"/{name}")

    callback = app_commands.rename(value=option[0])(
        app_commands.describe(value=option[1])(with_argument))
    return app_commands.Command(name=name, description=description, callback=callback)


@dataclass
class _Open:
    interaction: discord.Interaction
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    answered: bool = False  # a response or follow-up carried words
    closed: bool = False
    watchdog: asyncio.Task[None] | None = None  # defers if no answer comes in time


class Interactions:
    """Interactions that still await their answer, by interaction id (the message id the
    gateway knows them by)."""

    def __init__(self, allowed_mentions: discord.AllowedMentions) -> None:
        self._mentions = allowed_mentions
        self._open: dict[str, _Open] = {}

    def __contains__(self, key: object) -> bool:
        return key in self._open

    async def run(self, interaction: discord.Interaction,
                  handle: Callable[[], Awaitable[None]]) -> None:
        """Hand the command to the gateway; acknowledge in time whatever it does.

        The gateway returns once the command is stored; its answer follows. An answer
        given within DEFER_AFTER_S is the interaction's response, else the interaction is
        deferred then and the answer arrives as a follow-up."""
        entry = self._open[str(interaction.id)] = _Open(interaction)
        entry.watchdog = asyncio.create_task(self._defer_later(entry))
        try:
            await handle()
        except BaseException:
            entry.watchdog.cancel()
            await self._defer(entry)  # nothing will answer in time: acknowledge now
            raise

    async def send(self, key: str, chunk: Chunk) -> str | None:
        """The interaction's response if not yet given, else a follow-up."""
        entry = self._open[key]
        async with entry.lock:
            interaction = entry.interaction
            if not interaction.response.is_done():
                result = await interaction.response.send_message(
                    chunk.text, ephemeral=chunk.private, allowed_mentions=self._mentions)
                entry.answered = True
                return str(result.message_id) if result.message_id else None
            if chunk.private and not entry.answered:
                # Deferred in public, then refused: the refusal goes to the asker alone.
                await interaction.delete_original_response()
            sent = await interaction.followup.send(
                chunk.text, ephemeral=chunk.private, allowed_mentions=self._mentions,
                wait=True)
            entry.answered = True
            return str(sent.id)

    async def close(self, key: str) -> None:
        """Everything is said: an interaction that got no words must not hang."""
        entry = self._open.pop(key, None)
        if entry is None:
            return
        entry.closed = True
        if entry.watchdog is not None:
            entry.watchdog.cancel()
        async with entry.lock:
            response = entry.interaction.response
            try:
                if not response.is_done():
                    await response.send_message(CLOSE_EMPTY, ephemeral=True)
                elif not entry.answered:
                    await entry.interaction.delete_original_response()
            except discord.HTTPException as exc:
                log.warning("discord: closing interaction %s failed: %s", key, exc)

    async def abandon(self, forget: Callable[[discord.Interaction], Awaitable[None]]
                      ) -> None:
        """At shutdown: an interaction still waiting (queued behind a turn the drain cut
        short) is told privately to send it again, and `forget` drops its stored command,
        so nobody is left looking at "thinking..." and nothing runs twice."""
        for key in list(self._open):
            entry = self._open.pop(key)
            entry.closed = True
            if entry.watchdog is not None:
                entry.watchdog.cancel()
            try:
                async with entry.lock:
                    await self._say_privately(entry, RESTARTING)
                await forget(entry.interaction)
            except Exception as exc:  # closing down: say it and go on
                log.warning("discord: answering interaction %s at shutdown failed: %s",
                            key, exc)

    async def _say_privately(self, entry: _Open, text: str) -> None:
        interaction = entry.interaction
        if not interaction.response.is_done():
            await interaction.response.send_message(text, ephemeral=True)
            return
        if not entry.answered:
            await interaction.delete_original_response()  # the public "thinking..."
        await interaction.followup.send(text, ephemeral=True)

    async def _defer_later(self, entry: _Open) -> None:
        await asyncio.sleep(DEFER_AFTER_S)
        await asyncio.shield(self._defer(entry))  # once begun, a defer is not cut short

    async def _defer(self, entry: _Open) -> None:
        async with entry.lock:
            if entry.closed or entry.interaction.response.is_done():
                return
            try:
                await entry.interaction.response.defer(thinking=True)
            except discord.HTTPException as exc:  # the answer then goes to the channel
                log.warning("discord: acknowledging interaction %s failed: %s",
                            entry.interaction.id, exc)
