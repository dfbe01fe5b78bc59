"""Long polling of our own: an update is confirmed only once it was handled.

python-telegram-bot's Updater has two faults we cannot configure away. It parses a whole
getUpdates batch at once, so one update the library cannot read fails the batch, the
offset never moves and the same batch is fetched again and again while every chat goes
unanswered. And it confirms updates (the next call's offset) as soon as they are queued,
so a process that dies before the gateway stored a message loses it.

Here getUpdates goes through `Bot.do_api_request` without a return type, which returns
the JSON result as it came: the bot's own HTTP client for getUpdates (PTB routes that
endpoint to it), base URL and token. Each update is parsed alone (updates.py) and handed
to the Application in update_id order, awaited: the gateway's handler returns once the
message is in the ledger. Only then does the offset move past it, and the next getUpdates
carries that offset, which is what confirms it to Telegram. A crash at any point means a
redelivery, which the ledger makes a no-op, never a loss. `stop()` confirms what was
handled with one last call that does not wait.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import datetime as dtm
import logging
import warnings
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

from telegram import Bot, Update
from telegram.error import EndPointNotFound, InvalidToken, RetryAfter, TelegramError
from telegram.warnings import PTBUserWarning

from platforms.base import loop_time
from platforms.telegram.updates import FAILED, read_update, size_of, skipped, update_id_of

log = logging.getLogger(__name__)

FIRST_PAUSE_S = 0.5  # after a failed getUpdates; doubling up to the longest
LONGEST_PAUSE_S = 30.0
SUMMARY_EVERY_S = 60.0  # a failure that goes on is summed up this often at most
READ_MARGIN_S = 5.0  # on top of the long poll's own timeout (PTB's default read timeout)
BATCH = 100  # the most updates one getUpdates returns

# Hands an update to the application; False when it could not be stored (deliver again).
Process = Callable[[Update], Awaitable[bool]]


class Poller:
    """getUpdates in a loop for one bot; `start()` after `stop()` goes on where it was."""

    def __init__(self, bot: Bot, process: Process, counters: collections.Counter[str], *,
                 timeout_s: float, allowed_updates: Sequence[str],
                 allowed: Callable[[], bool] = lambda: True,
                 standby: Callable[[], None] = lambda: None) -> None:
        self.bot = bot
        self.process = process  # returns once handled: False when it was not stored
        self.counters = counters
        self.allowed = allowed  # asked before every getUpdates: may this process poll?
        self.standby = standby  # told when polling stopped because it may not
        self.timeout = dtm.timedelta(seconds=timeout_s)
        self.allowed_updates = list(allowed_updates)
        self.offset = 0  # every update below it was handled (or skipped)
        self._sent = 0  # the offset the last answered getUpdates carried: confirmed
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._parked = False  # waiting on Telegram or in a pause: nothing of ours to cut
        self._pauses = Backoff()
        self._trouble = Trouble()

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def start(self) -> None:
        if self.running:
            return
        _expect_raw_get_updates()
        await self.bot.delete_webhook()  # Telegram refuses getUpdates while one is set
        self._stopping = False
        self._task = asyncio.create_task(self._run(), name="telegram-polling")

    async def stop(self) -> None:
        """End the loop promptly: a parked poll is cancelled, an update being handled is
        finished (the rest of its batch comes again). Then confirm what was handled."""
        task, self._task = self._task, None
        if task is None:
            return
        self._stopping = True
        if self._parked:
            task.cancel()
        await asyncio.wait({task})
        if self.offset > self._sent and self.allowed():  # the new poller confirms them
            await self._confirm()

    # --- the loop -------------------------------------------------------------------------
    async def _run(self) -> None:
        try:
            while not self._stopping:
                batch = await self._next_batch()
                if batch is None:
                    return
                handed = await self._hand_over(batch)
                if handed is None:  # the database is out of reach: Telegram keeps the rest
                    await self._wait_out(TelegramError("an update could not be stored; it "
                                                       "is asked for again"))
                elif not handed:
                    # Nothing in it could be confirmed: asking at once would get it again.
                    await self._wait_out(TelegramError("getUpdates answered updates "
                                                       "without an update_id"))
        except Exception:  # a bug of ours: say so rather than go deaf without a word
            log.exception("telegram: polling stopped")

    async def _next_batch(self) -> list[Any] | None:
        """getUpdates' next answer, failures waited out. None: polling ends (stopping, or
        Telegram refused the token)."""
        while not self._stopping:
            if not self.allowed():  # another process may be polling now (we were paused)
                self._stopping = True
                self.standby()
                return None
            try:
                with self._parking():
                    batch = await self._get_updates(self.timeout)
            except (InvalidToken, EndPointNotFound):  # 401/404 (PTB names a 404 either way)
                log.error("telegram: polling stopped: Telegram refused the bot token (revoked "
                          "or wrong); receiving resumes only after a restart")
                return None
            except Exception as exc:  # network, 5xx, 409, 429, timeouts, a garbled answer
                await self._wait_out(exc)
                continue
            self._pauses.reset()
            self._trouble.over()
            return batch
        return None

    async def _hand_over(self, batch: list[Any]) -> bool | None:
        """Each update to the application in update_id order, the offset moving past each
        once it was handled. False when the batch held nothing to confirm; None when an
        update could not be stored (it and the rest of the batch come again)."""
        before = self.offset
        for raw in sorted(batch, key=lambda raw: update_id_of(raw) or 0):
            if self._stopping:
                return True  # not confirmed: the rest comes again
            if not await self._one(raw):
                return None
        return not batch or self.offset != before

    async def _one(self, raw: Any) -> bool:
        """Hand one update over; False when it could not be stored (not confirmed)."""
        update = read_update(raw, self.bot, self.counters)  # logged and counted if not
        if update is not None:
            try:
                if not await self.process(update):
                    return False
            except Exception as exc:  # a handler's own error goes to the adapter's error
                # handler inside process_update; this is the library failing around it
                self.counters[FAILED] += 1
                skipped(update.update_id, size_of(raw),
                        f"failed to be handled ({type(exc).__name__})", error=exc)
        update_id = update_id_of(raw)
        if update_id is not None:
            self.offset = max(self.offset, update_id + 1)
        return True

    async def _wait_out(self, exc: Exception) -> None:
        pause = self._pauses.after(exc)
        self._trouble.seen(type(exc).__name__, str(exc) or type(exc).__name__, pause)
        with self._parking():
            await asyncio.sleep(pause)

    async def _get_updates(self, wait: dtm.timedelta, limit: int = BATCH) -> list[Any]:
        """getUpdates' result as raw JSON; `wait` is the long poll's timeout."""
        offset = self.offset
        result = await self.bot.do_api_request(
            "getUpdates", api_kwargs={"offset": offset, "limit": limit, "timeout": wait,
                                      "allowed_updates": self.allowed_updates},
            read_timeout=wait.total_seconds() + READ_MARGIN_S)
        if not isinstance(result, list):
            raise TelegramError(f"getUpdates answered a {type(result).__name__}, not a list")
        self._sent = max(self._sent, offset)
        return result

    async def _confirm(self) -> None:
        try:
            await self._get_updates(dtm.timedelta(0), limit=1)
        except Exception as exc:
            log.warning("telegram: confirming the last handled updates failed (%s); they "
                        "will come again and be dropped as already stored", exc)

    @contextlib.contextmanager
    def _parking(self) -> Iterator[None]:
        self._parked = True
        try:
            yield
        finally:
            self._parked = False


class Backoff:
    """Pauses after failed calls: doubling from the first to the longest, back to the first
    after a success; flood control waits at least as long as Telegram asked."""

    def __init__(self, first: float = FIRST_PAUSE_S, longest: float = LONGEST_PAUSE_S) -> None:
        self.first = first
        self.longest = longest
        self._next = first

    def after(self, exc: BaseException) -> float:
        pause, self._next = self._next, min(self._next * 2, self.longest)
        if isinstance(exc, RetryAfter):
            pause = max(pause, retry_after_s(exc))
        return pause

    def reset(self) -> None:
        self._next = self.first


class Trouble:
    """What polling says while getUpdates fails: one line when a kind of failure starts,
    then at most one summary a minute while it goes on, one line when it works again."""

    def __init__(self, every_s: float = SUMMARY_EVERY_S,
                 clock: Callable[[], float] | None = None) -> None:
        self.every_s = every_s
        self.clock = clock or loop_time
        self._kind: str | None = None
        self._unsaid = 0  # failures since the last line
        self._failures = 0  # since polling last worked
        self._said_at = 0.0

    def seen(self, kind: str, text: str, pause: float) -> None:
        now = self.clock()
        self._failures += 1
        if kind != self._kind:
            self._kind, self._unsaid, self._said_at = kind, 0, now
            log.warning("telegram: getUpdates failed: %s; trying again in %.1f s", text, pause)
        elif now - self._said_at >= self.every_s:
            log.warning("telegram: getUpdates still failing: %s (%d times since the last "
                        "line); trying again in %.1f s", text, self._unsaid + 1, pause)
            self._unsaid, self._said_at = 0, now
        else:
            self._unsaid += 1

    def over(self) -> None:
        if self._kind is not None:
            log.info("telegram: getUpdates works again after %d failed calls", self._failures)
        self._kind, self._unsaid, self._failures = None, 0, 0


def retry_after_s(exc: RetryAfter) -> float:
    """Telegram's flood-control pause in seconds."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PTB deprecates the int form; we take either
        value = exc.retry_after
    return value.total_seconds() if isinstance(value, dtm.timedelta) else float(value)


def _expect_raw_get_updates() -> None:
    # do_api_request warns that getUpdates has a method of its own; that method parses the
    # whole batch at once, which is the point of calling it raw. An equal filter replaces
    # itself, so calling this again adds nothing.
    warnings.filterwarnings("ignore", message=r"Please use 'Bot\.getUpdates'",
                            category=PTBUserWarning)
