"""Who may talk to the bot, who is an admin, and polite refusals for everyone else."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping

from gateway.clock import monotonic as clock_monotonic
from gateway.config import Config
from platforms.base import InboundMessage, PlatformAdapter

# Asks the message's platform whether its sender administers the chat (an adapter's
# `check_admin`); by default the adapter's word when the message arrived.
AdminLookup = Callable[[InboundMessage], Awaitable[bool]]


async def _hint(msg: InboundMessage) -> bool:
    return msg.is_admin_hint


def ask_adapters(adapters: Mapping[str, PlatformAdapter]) -> AdminLookup:
    """The lookup a running gateway uses: the message's own adapter is asked."""
    async def lookup(msg: InboundMessage) -> bool:
        adapter = adapters.get(msg.platform)
        return await adapter.check_admin(msg) if adapter is not None else msg.is_admin_hint
    return lookup


log = logging.getLogger(__name__)

REFUSAL_INTERVAL_S = 3600.0  # one refusal per chat per hour, then silence


class Authorizer:
    def __init__(self, config: Config, clock: Callable[[], float] = clock_monotonic,
                 lookup: AdminLookup = _hint) -> None:
        self.lookup = lookup  # wiring sets it to ask the adapters (ask_adapters)
        gw = config.gateway
        self._open = gw.open
        self._allowed = {p: set(map(str, ids)) for p, ids in gw.allowed_users.model_dump().items()}
        self._admins = {p: set(map(str, ids)) for p, ids in gw.admins.model_dump().items()}
        self._clock = clock
        self._refused_at: dict[str, float] = {}

    def _owner(self, msg: InboundMessage) -> bool:
        """An admin by configuration (or the local user, who owns the terminal)."""
        return self.configured_admin(msg.platform, msg.user_id)

    def configured_admin(self, platform: str, user_id: str) -> bool:
        """An admin by configuration, known without asking the platform (budgets)."""
        return platform == "console" or user_id in self._admins.get(platform, set())

    async def is_admin(self, msg: InboundMessage) -> bool:
        """May manage this chat: configured admins, and the platform's own group admins
        (asked of the platform only now, when a command needs it)."""
        return self._owner(msg) or await self.lookup(msg)

    def is_allowed(self, msg: InboundMessage) -> bool:
        """May talk to the bot at all. Administering some group is no invitation: a closed
        bot admits only its configured admins and allowed users."""
        if self._open or self._owner(msg):
            return True
        return msg.user_id in self._allowed.get(msg.platform, set())

    def refusal(self, msg: InboundMessage) -> str | None:
        """The refusal to send a stranger, or None when this chat was refused recently."""
        now = self._clock()
        last = self._refused_at.get(msg.chat_key)
        if last is not None and now - last < REFUSAL_INTERVAL_S:
            return None
        self._refused_at[msg.chat_key] = now
        log.info("refused %s user %s in %s", msg.platform, msg.user_id, msg.chat_key)
        return (f"Sorry, this bot is private. Ask its owner to add your {msg.platform} "
                f"user id {msg.user_id} to allowed_users.")

    async def may_manage(self, msg: InboundMessage) -> bool:
        """/new, /compress, /usage: the user in a DM, admins in a group."""
        return not msg.is_group or await self.is_admin(msg)
