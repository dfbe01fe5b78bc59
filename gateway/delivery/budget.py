"""One sending budget per platform: per-chat pacing, per-group and per-bot rates, pauses.

Sends wait for their turn; a typing indicator never waits: it goes only when the chat is
idle and the bot has room this second, so it can never push a send back (see
docs/architecture.md, "Sending").
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

from gateway.clock import monotonic as clock_monotonic
from platforms.base import SendLimits

MINUTE_S = 60.0


class SendBudget:
    """Paces one platform's outgoing calls to the limits it declares."""

    def __init__(self, limits: SendLimits, clock: Callable[[], float] = clock_monotonic) -> None:
        self.limits = limits
        self._clock = clock
        self._next: dict[str, float] = {}  # chat -> earliest time of its next message
        self._group_sent: dict[str, deque[float]] = {}  # group chat -> sends in the last minute
        self._bot_sent: deque[float] = deque()  # every call in the last second
        self._waiting: dict[str, int] = {}  # chat -> sends waiting for their turn
        self._turns: dict[str, asyncio.Lock] = {}  # chat -> the queue of those sends
        # Chats whose own turn has come queue here, first come first served, for the bot-wide
        # rate: without a queue every waiter wakes when a slot frees and a few win over and
        # over, starving the rest.
        self._bot_turn = asyncio.Lock()

    def pause(self, chat_key: str, seconds: float) -> None:
        """The platform said "retry after": nothing goes to this chat before then."""
        until = self._clock() + seconds
        self._next[chat_key] = max(self._next.get(chat_key, 0.0), until)

    async def wait_turn(self, chat_key: str, *, group: bool) -> None:
        """Wait until a message may go to this chat, and book the slot."""
        self._waiting[chat_key] = self._waiting.get(chat_key, 0) + 1
        lock = self._turns.setdefault(chat_key, asyncio.Lock())
        try:
            async with lock:  # first come, first served: a chat's messages keep their order
                await self._until(lambda: self._chat_delay(chat_key, group))
                async with self._bot_turn:
                    await self._until(self._bot_delay)
                    self._book(chat_key, group)
        finally:
            self._waiting[chat_key] -= 1
            if not self._waiting[chat_key]:
                del self._waiting[chat_key]
                if not lock.locked():
                    self._turns.pop(chat_key, None)

    def typing_allowed(self, chat_key: str, *, group: bool) -> bool:
        """Typing is dropped first: only for an idle chat whose next send could go now, and
        while no send waits for the bot-wide rate."""
        if self._waiting.get(chat_key) or self._bot_turn.locked():
            return False
        if self._chat_delay(chat_key, group) > 0 or self._bot_delay() > 0:
            return False
        if self.limits.per_bot_per_second:  # it is a call too, but holds no chat slot
            self._bot_sent.append(self._clock())
        return True

    def try_book(self, chat_key: str, *, group: bool, keep: int = 0,
                 message: bool = True) -> bool:
        """Book a slot for a streamed update only if it can go right now, leaving `keep`
        of the group's per-minute sends for the final reply; never waits, never queues.

        `message=False` (a draft, which is no message in the chat) takes only a slot of
        the bot-wide rate, so the final reply need not wait out the chat's pace for it."""
        if self._waiting.get(chat_key) or self._bot_turn.locked():
            return False
        if self._chat_delay(chat_key, group) > 0 or self._bot_delay() > 0:
            return False
        per_group = self.limits.per_group_per_minute
        if group and per_group:
            sent = self._window(self._group_sent.setdefault(chat_key, deque()), MINUTE_S)
            if len(sent) + 1 + keep > per_group:
                return False
        if message:
            self._book(chat_key, group)
        elif self.limits.per_bot_per_second:
            self._bot_sent.append(self._clock())
        return True

    @staticmethod
    async def _until(delay: Callable[[], float]) -> None:
        """Sleep until `delay()` says the time has come (a clock, not an event: no one
        signals the end of a rate window)."""
        while (wait := delay()) > 0:  # noqa: ASYNC110
            await asyncio.sleep(wait)

    def _chat_delay(self, chat_key: str, group: bool) -> float:
        now = self._clock()
        wait = self._next.get(chat_key, 0.0) - now
        per_group = self.limits.per_group_per_minute
        if group and per_group:
            sent = self._window(self._group_sent.setdefault(chat_key, deque()), MINUTE_S)
            if len(sent) >= per_group:
                wait = max(wait, sent[0] + MINUTE_S - now)
        return wait

    def _bot_delay(self) -> float:
        per_bot = self.limits.per_bot_per_second
        if not per_bot:
            return 0.0
        sent = self._window(self._bot_sent, 1.0)
        return sent[0] + 1.0 - self._clock() if len(sent) >= per_bot else 0.0

    def _window(self, sent: deque[float], span: float) -> deque[float]:
        cutoff = self._clock() - span
        while sent and sent[0] <= cutoff:
            sent.popleft()
        return sent

    def _book(self, chat_key: str, group: bool) -> None:
        now = self._clock()
        interval = self.limits.per_chat_interval_s or 0.0
        self._next[chat_key] = max(self._next.get(chat_key, 0.0), now + interval)
        if group and self.limits.per_group_per_minute:
            self._group_sent.setdefault(chat_key, deque()).append(now)
        if self.limits.per_bot_per_second:
            self._bot_sent.append(now)
        if len(self._next) > 10_000:  # forget chats whose slots are long past
            self._next = {k: v for k, v in self._next.items() if v > now}
