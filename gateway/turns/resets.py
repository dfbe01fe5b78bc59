"""Session resets: a chat's conversation ends by itself after a quiet spell, or daily.

`gateway.session_reset.mode`: `none`, `idle` (no message for `idle_minutes`), `daily`
(at `at_hour` in `timezone`, whatever daylight saving does) or `both`. An apscheduler
job ends due sessions on time (so the context engine's `on_session_end` runs then); a
message that arrives first (the service was down at the hour) ends its stale session
before the turn. Either way the chat is told once, with its next answer, and the next
message starts a root session. The old session is kept, as always.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass
from zoneinfo import ZoneInfo

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from gateway.clock import utc_now
from gateway.config.models import SessionResetConfig
from gateway.turns.conversations import Conversations
from storage.base import SessionStore
from storage.models import ChatActivity

log = logging.getLogger(__name__)

SWEEP_EVERY = dt.timedelta(minutes=1)  # how late an idle reset may be, at most
NOTICES = {
    "idle": "(It had been quiet here for a while, so this is a fresh conversation; the "
            "earlier one is kept.)",
    "daily": "(A new day, a fresh conversation; yesterday's is kept.)",
}
Clock = Callable[[], dt.datetime]  # the calendar; gateway/clock.py's utc_now by default
__all__ = ["Clock", "utc_now"]


@dataclass(frozen=True)
class ResetPolicy:
    mode: str = "none"
    idle: dt.timedelta = dt.timedelta(minutes=1440)
    at_hour: int = 4
    zone: ZoneInfo = ZoneInfo("UTC")

    @classmethod
    def from_config(cls, cfg: SessionResetConfig) -> ResetPolicy:
        return cls(cfg.mode, dt.timedelta(minutes=cfg.idle_minutes), cfg.at_hour,
                   ZoneInfo(cfg.timezone))

    @property
    def idle_resets(self) -> bool:
        return self.mode in ("idle", "both")

    @property
    def daily_resets(self) -> bool:
        return self.mode in ("daily", "both")

    def daily_trigger(self) -> CronTrigger:
        return CronTrigger(hour=self.at_hour, minute=0, timezone=self.zone)

    def due(self, last: dt.datetime, now: dt.datetime) -> str | None:
        """Why a session whose chat last spoke at `last` has ended by `now`, if it has."""
        if self.idle_resets and now - last >= self.idle:
            return "idle"
        if self.daily_resets:
            boundary = self.daily_trigger().get_next_fire_time(
                None, last + dt.timedelta(microseconds=1))
            if boundary is not None and boundary <= now:
                return "daily"
        return None


class Resets:
    """Applies the policy to the store's chats; `start()` schedules it, `stop()` ends that."""

    def __init__(self, policy: ResetPolicy, store: SessionStore, conversations: Conversations,
                 clock: Clock = utc_now, busy: Callable[[str], bool] = lambda key: False
                 ) -> None:
        self.policy = policy
        self.store = store
        self.conversations = conversations
        self.clock = clock
        self.busy = busy  # a chat whose turn is running is not ended under it
        self._scheduler: AsyncIOScheduler | None = None

    def start(self) -> None:
        if self.policy.mode == "none" or self._scheduler is not None:
            return
        scheduler = AsyncIOScheduler(timezone=self.policy.zone)
        if self.policy.idle_resets:
            scheduler.add_job(self.sweep, IntervalTrigger(seconds=SWEEP_EVERY.total_seconds()),
                              id="idle-resets", coalesce=True, max_instances=1)
        if self.policy.daily_resets:
            scheduler.add_job(self.sweep, self.policy.daily_trigger(), id="daily-resets",
                              coalesce=True, max_instances=1, misfire_grace_time=3600)
        scheduler.start()
        self._scheduler = scheduler

    def stop(self) -> None:
        if self._scheduler is not None:
            self._scheduler.shutdown(wait=False)
            self._scheduler = None

    def next_runs(self) -> dict[str, dt.datetime]:
        """When each scheduled job fires next (for status lines and tests)."""
        if self._scheduler is None:
            return {}
        return {job.id: job.next_run_time for job in self._scheduler.get_jobs()}

    async def sweep(self) -> int:
        """End every due session now; how many ended."""
        ended = 0
        for activity in await self.store.chat_activity():
            if not self.busy(activity.chat_key) and await self._expire(activity):
                ended += 1
        return ended

    async def before_turn(self, chat_key: str) -> str | None:
        """End the chat's session if it went stale unseen; the notice to send, once."""
        if self.policy.mode == "none":
            return None
        for activity in await self.store.chat_activity(chat_key):
            await self._expire(activity)
        key = _notice_key(chat_key)
        reason = await self.store.get_setting(key)
        if not reason:
            return None
        await self.store.put_setting(key, "")
        return NOTICES.get(reason)

    async def _expire(self, activity: ChatActivity) -> bool:
        last = dt.datetime.fromtimestamp(activity.last_at, dt.UTC)
        reason = self.policy.due(last, self.clock())
        if reason is None:
            return False
        if await self.conversations.end_session(activity.chat_key, reason,
                                                session_id=activity.session_id):
            await self.store.put_setting(_notice_key(activity.chat_key), reason)
            log.info("%s: session %s ended (%s reset)", activity.chat_key,
                     activity.session_id, reason)
        return True


def _notice_key(chat_key: str) -> str:
    return f"reset-notice:{chat_key}"
