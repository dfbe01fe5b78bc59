"""This process's part in a gateway of several processes on one shared database.

Any process may receive any message and stores it once (the ledger's unique key). Only the
holder of a chat's lease runs that chat's turns, so each chat is still answered in order
and once: a process that stores a message for a chat it does not hold tries to take the
lease; when another process holds it, it leaves the message stored and sends a notice,
and the holder adopts it. A heartbeat renews this process's leases, gives up chats idle
for a lease period, and adopts chats whose holder died (their leases expired with work
left open). docs/scale-out.md tells the whole story.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
import secrets
import socket
from collections.abc import AsyncIterator, Awaitable, Callable

from gateway import clock
from gateway.turns.jobs import HoldJob, Job, ResendJob, recovery_jobs
from storage.coordination import Coordination, Fence, Notice, current_fence
from storage.errors import StoreError
from storage.models import InboundRecord

log = logging.getLogger(__name__)

# Taken off a lease's time when judging it by our own clock (clocks run at slightly
# different rates; the database's judges).
SURE_MARGIN_S = 0.5

# Routes one pending ledger row the way a newly received message is routed.
Adopt = Callable[[InboundRecord], Awaitable[None]]


def holder_name() -> str:
    """Who this process is, in lease rows and logs: host, pid and a random tail."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


def job_ids(job: Job) -> list[int]:
    if isinstance(job, ResendJob):
        return [record.id for record in job.records]
    if isinstance(job, HoldJob):
        return []
    return [job.record.id]


def platform_order(rows: list[InboundRecord]) -> list[InboundRecord]:
    """One chat's rows in the order the platform gave its messages (Telegram's message
    ids and Discord's snowflakes grow), not the order processes happened to store them."""
    def key(record: InboundRecord) -> tuple[int, int, str, float]:
        digits = record.message_id.isdigit()
        return (0 if digits else 1, len(record.message_id) if digits else 0,
                record.message_id if digits else "", record.received_at)
    return sorted(rows, key=key)


class Cluster:
    def __init__(self, coordination: Coordination, *, open_rows: Callable[[str], Awaitable[
                 list[InboundRecord]]], submit: Callable[[str, Job], None],
                 busy: Callable[[str], bool], adopt: Adopt, ttl: float = 30.0,
                 moved: Callable[[str], None] = lambda chat_key: None) -> None:
        self.coordination = coordination
        self.holder = holder_name()
        self.ttl = ttl
        self._open_rows = open_rows  # the store's open ledger rows of one chat
        self._submit = submit  # the router's submit
        self._busy = busy  # whether the router has work queued or running for a chat
        self._adopt = adopt
        # Called when a chat comes here or goes: what this process cached of it (the
        # agent, the live session) may be behind another process's turns; drop it.
        self._moved = moved
        self.held: dict[str, float] = {}  # chat key -> when it last had work here
        self._epochs: dict[str, int] = {}  # chat key -> the generation of our take of it
        # chat key -> until when (this process's monotonic clock) its lease surely holds:
        # a lease taken or renewed at t was given until the database's now + ttl, later
        # than t + ttl. Time runs on while the process is paused, so a paused process
        # sees on waking that it may have lost its chats (`may_act`).
        self._sure_until: dict[str, float] = {}
        self._roles: dict[str, float] = {}  # role (poll:<platform>) -> sure until, as above
        self._routed: dict[str, set[int]] = {}  # ledger rows handed to the router, by chat
        self._adopting: set[int] = set()  # rows being routed by adopt_open right now
        self._retaking: set[str] = set()  # chats being given up and offered again
        self._tasks: set[asyncio.Task[None]] = set()
        self._loops: list[asyncio.Task[None]] = []
        # When each background loop last did its work without an error (unix seconds), for
        # metrics: a loop that keeps failing shows as a time that stops moving.
        self.last_ok: dict[str, float] = {}
        # After the database was out of reach, every holder's leases may have expired
        # with no one able to renew them: while this process's renewals fail, and for one
        # lease period after they work again (or after the notice connection came back),
        # it takes no expired lease of another's, so each holder first renews its own (and
        # records what it sent meanwhile) instead of having its replies sent again by
        # another. Free leases are taken as ever.
        self._cut_off = False  # the last renewal failed
        self._patient_until = 0.0  # monotonic

    # --- lifecycle --------------------------------------------------------------------
    async def start(self) -> None:
        await self.coordination.listen(self._heard, self._relisten)
        self.last_ok["listen"] = clock.wall()
        await self.sweep()  # what a dead process (or our own last run) left open
        # Renewal runs on its own: other heartbeat work (a slow sweep) never delays it.
        self._loops = [asyncio.create_task(self._forever("renew", self.renew),
                                           name="cluster-renew"),
                       asyncio.create_task(self._forever("heartbeat", self.beat),
                                           name="cluster-heartbeat")]

    async def stop(self) -> None:
        """Stop adopting new work; the leases stay until released by `release_all`."""
        loops, self._loops = self._loops, []
        for task in loops:
            task.cancel()
        for task in loops:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for task in list(self._tasks):
            task.cancel()

    async def release_all(self) -> None:
        """After the chats drained: let other processes take them at once, not at expiry."""
        for chat_key in list(self.held):
            await self._release(chat_key)

    # --- the chats --------------------------------------------------------------------
    async def enqueue(self, chat_key: str, job: Job) -> None:
        """A job for a chat: run it here when this process holds (or can take) the chat."""
        if self.may_act(chat_key):
            if job_ids(job) and not set(job_ids(job)) & self._adopting \
                    and not self._knows_all_before(chat_key, job):
                # A message stored elsewhere a moment ago may come first, its notice not
                # yet here: route the chat's open rows in the platform's order, this one
                # among them.
                await self.adopt_open(chat_key)
            else:
                self._hand_over(chat_key, job)
            return
        held_by = getattr(getattr(job, "record", None), "held_by", None)
        if held_by is not None and held_by != self.holder:
            self._lost(chat_key)  # a live holder, told by the store as it stored the row
            return
        if await self._claim(chat_key):
            await self.adopt_open(chat_key)  # this job's row is among them, in its place
            return
        self._lost(chat_key)
        await self.coordination.notify(chat_key)  # the holder adopts it

    def _knows_all_before(self, chat_key: str, job: Job) -> bool:
        """Every row the chat had open when this job's was stored is routed here already
        (the store said which, as it stored it): nothing to read before handing it over."""
        before = getattr(getattr(job, "record", None), "open_before", None)
        return before is not None and set(before) <= self._routed.get(chat_key, set())

    def _hand_over(self, chat_key: str, job: Job) -> None:
        routed = self._routed.setdefault(chat_key, set())
        fresh = [i for i in job_ids(job) if i not in routed]
        if not fresh:
            return  # adopted twice (a notice and a sweep): already with the router
        routed.update(fresh)
        self.held[chat_key] = clock.monotonic()
        self._submit(chat_key, job)

    async def adopt_open(self, chat_key: str) -> None:
        """Route the chat's open ledger rows this process has not routed yet, in order."""
        rows = platform_order(await self._open_rows(chat_key))
        routed = self._routed.setdefault(chat_key, set())
        fresh = [r for r in rows if r.id not in routed and r.id not in self._adopting]
        for key, work in recovery_jobs(fresh):
            if isinstance(work, tuple):  # a pending message: routed like a new one
                self._adopting.add(work[1].id)
                try:
                    await self._adopt(work[1])
                finally:
                    self._adopting.discard(work[1].id)
            else:
                self._hand_over(key, work)

    async def offer(self, chat_key: str) -> None:
        """Take the chat when its lease is free (or ours) and adopt what it has open."""
        if self.may_act(chat_key):
            await self.adopt_open(chat_key)
        elif await self._claim(chat_key):  # ours again (or still): nothing cached is trusted
            await self.adopt_open(chat_key)
        else:
            self._lost(chat_key)

    async def _claim(self, chat_key: str) -> bool:
        """Take the chat's lease (a new generation) when it is free or ours, or expired
        unless the database was just out of reach (see `_patient_until`)."""
        asked = clock.monotonic()
        epoch = await self.coordination.claim(f"chat:{chat_key}", self.holder, self.ttl,
                                              take_expired=self._may_take_expired())
        if epoch is None:
            return False
        self._took(chat_key, asked, epoch)
        return True

    def _may_take_expired(self) -> bool:
        return not self._cut_off and clock.monotonic() >= self._patient_until

    def _be_patient(self) -> None:
        self._patient_until = max(self._patient_until, clock.monotonic() + self.ttl)

    def _took(self, chat_key: str, asked: float, epoch: int) -> None:
        """The chat is ours from now; whatever we knew of it before is not trusted."""
        self._moved(chat_key)
        self.held[chat_key] = clock.monotonic()
        self._epochs[chat_key] = epoch
        self._sure_until[chat_key] = self._sure_from(asked)

    def _lost(self, chat_key: str) -> None:
        """Another process holds the chat (if this one thought it did, it no longer may)."""
        if chat_key in self.held:
            self._let_go(chat_key)
            self._moved(chat_key)

    def _let_go(self, chat_key: str) -> int | None:
        """Forget our take of the chat; the generation it had."""
        self.held.pop(chat_key, None)
        self._sure_until.pop(chat_key, None)
        return self._epochs.pop(chat_key, None)

    def _sure_from(self, asked: float) -> float:
        """Until when a lease taken or renewed by a call begun at `asked` surely holds."""
        return asked + self.ttl - SURE_MARGIN_S

    def may_act(self, chat_key: str) -> bool:
        """Whether this process surely still holds the chat's lease: it may write and send
        for it. False once the lease may have lapsed (a pause, renewals failing), until a
        renewal says it is still ours; and for work begun under an older take of the chat
        (its fence), once the chat was taken again since."""
        if chat_key not in self.held or clock.monotonic() >= self._sure_until.get(chat_key, 0):
            return False
        fence = current_fence()
        return fence is None or fence.chat_key != chat_key \
            or fence.epoch == self._epochs.get(chat_key)

    def holds(self, fence: Fence) -> bool:
        """Whether work begun under `fence` may still speak for its chat."""
        return self.may_act(fence.chat_key) and fence.epoch == self._epochs.get(fence.chat_key)

    def fence_of(self, chat_key: str) -> Fence | None:
        """Our take of the chat, for the work about to run for it (None: not ours)."""
        epoch = self._epochs.get(chat_key)
        return Fence(chat_key, epoch) if epoch is not None and chat_key in self.held else None

    def forfeit(self, chat_key: str, first: Callable[[], Awaitable[None]] | None = None
                ) -> None:
        """A turn was dropped because the chat's lease may have lapsed: give the chat up
        and take it again if it is free, so its open messages are answered once, here or
        by whoever holds it now. `first` runs before the lease goes (the dropped turn's
        attempts are given back). Once per chat at a time: a second turn dropped meanwhile
        must not release the lease the first retake has just taken again."""
        if chat_key in self._retaking:
            return
        # The take to give up is the one the dropped work began under: when the chat was
        # taken again since, releasing by that generation leaves the newer take alone.
        fence = current_fence()
        epoch = self._let_go(chat_key)
        if fence is not None and fence.chat_key == chat_key:
            epoch = fence.epoch
        self._routed.pop(chat_key, None)
        self._retaking.add(chat_key)
        self._spawn(self._retake(chat_key, first, epoch), f"retake:{chat_key}")

    async def _retake(self, chat_key: str, first: Callable[[], Awaitable[None]] | None,
                      epoch: int | None) -> None:
        try:
            if first is not None:
                await first()
            if epoch is not None:  # if still ours at that generation, never a newer take
                await self.coordination.release(f"chat:{chat_key}", self.holder, epoch)
        finally:
            self._retaking.discard(chat_key)
        await self.offer(chat_key)

    def _heard(self, notice: Notice) -> None:
        """A notice: ours to act on when addressed to us or to whoever holds the chat (every
        process hears every notice; one for another process costs nothing here)."""
        if notice.to is not None and notice.to != self.holder:
            return
        self._spawn(self._noticed(notice), f"notice:{notice.chat_key}")

    async def _noticed(self, notice: Notice) -> None:
        """Route the message the notice brought, when every row open before it is routed
        here already (no read, as for a message stored here); else look at the chat."""
        record, chat_key = notice.record, notice.chat_key
        if record is not None and self.may_act(chat_key) \
                and set(record.open_before or ()) <= self._routed.get(chat_key, set()):
            await self._adopt(record)
            return
        await self.offer(chat_key)

    def _spawn(self, work: Awaitable[None], name: str) -> None:
        async def run() -> None:
            try:
                await work
            except StoreError as exc:
                log.warning("cluster: %s failed: %s", name, exc)
            except Exception:
                log.exception("cluster: %s failed", name)
        # The cluster's own work, under no chat's fence (even when a turn gave a chat up).
        task = asyncio.create_task(run(), name=name, context=contextvars.Context())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- the heartbeat ----------------------------------------------------------------
    async def _forever(self, name: str, work: Callable[[], Awaitable[None]]) -> None:
        """`work` every third of a lease for as long as the process runs. A failure (the
        database restarting, a bug) is logged and tried again after a short pause; the
        loop itself never ends but by cancellation (docs/scale-out.md)."""
        pause = self.ttl / 3
        failures = 0
        while True:
            await asyncio.sleep(pause if not failures else min(pause, 0.5 * failures))
            try:
                await work()
            except Exception as exc:  # noqa: BLE001 - the loop must outlive any failure
                failures += 1
                log.log(logging.WARNING if failures == 1 else logging.DEBUG,
                        "cluster %s failed (%s); trying again", name, exc,
                        exc_info=not isinstance(exc, StoreError))
                continue
            if failures:
                log.info("cluster %s works again after %d failed tries", name, failures)
            failures = 0
            self.last_ok[name] = clock.wall()

    async def renew(self) -> None:
        """Extend our leases; a chat whose lease was lost is dropped from ours."""
        roles = set(self._roles)
        asked, before = clock.monotonic(), set(self.held)  # a chat taken meanwhile is not
        try:  # in this renewal
            kept = await self.coordination.renew(
                self.holder, self.ttl, [f"chat:{k}" for k in before] + list(roles))
        except StoreError:
            self._cut_off = True
            raise
        if self._cut_off:  # the database is back: let every holder renew first
            self._cut_off = False
            self._be_patient()
            log.info("cluster: the database answers again; taking no expired lease of "
                     "another process for %.0f s, while each renews its own", self.ttl)
        for chat_key in [k for k in before & self.held.keys() if f"chat:{k}" not in kept]:
            log.warning("lost the lease of %s (renewed too late); another process takes it",
                        chat_key)
            self._lost(chat_key)
        for chat_key in before & self.held.keys():
            self._sure_until[chat_key] = self._sure_from(asked)
        for role in roles & self._roles.keys():
            self._roles[role] = self._sure_from(asked) if role in kept else 0.0

    def _relisten(self) -> None:
        """Listening again after the connection was lost: notices sent meanwhile were
        missed, so look at our chats and the unattended ones as a notice would; the
        database may have been away for everyone, so no expired lease is taken for a
        while (`_be_patient`)."""
        self.last_ok["listen"] = clock.wall()
        self._be_patient()
        for chat_key in list(self.held):
            self._spawn(self.offer(chat_key), f"relisten:{chat_key}")
        self._spawn(self.sweep(), "relisten-sweep")

    async def beat(self) -> None:
        """Give up idle chats; adopt chats nobody attends."""
        now = clock.monotonic()
        for chat_key, last in list(self.held.items()):
            if not self._busy(chat_key) and now - last > self.ttl:
                await self._release(chat_key)
        await self.sweep()

    async def sweep(self) -> None:
        expired = self._may_take_expired()
        for chat_key in await self.coordination.unattended_chats(expired=expired):
            await self.offer(chat_key)

    async def _release(self, chat_key: str) -> None:
        epoch = self._let_go(chat_key)
        if epoch is not None:
            await self.coordination.release(f"chat:{chat_key}", self.holder, epoch)
        self._moved(chat_key)
        # A row stored elsewhere while we held the chat, whose notice we may have missed:
        # take the chat again for it. Rows that left the ledger are forgotten.
        rows = await self._open_rows(chat_key)
        open_ids = {r.id for r in rows}
        routed = self._routed.pop(chat_key, set()) & open_ids
        if routed:
            self._routed[chat_key] = routed
        if open_ids - routed:
            await self.offer(chat_key)

    # --- single-instance roles (a platform's poller) ----------------------------------
    async def lead(self, role: str) -> None:
        """Return once this process holds `role`; until then, try every third of a lease."""
        waiting = False
        while True:
            asked = clock.monotonic()
            try:
                if await self.coordination.claim(role, self.holder, self.ttl) is not None:
                    break
            except StoreError as exc:
                log.warning("%s: asking for it failed (%s); trying again", role, exc)
            if not waiting:
                log.info("%s: another process holds it; standing by", role)
                waiting = True
            await asyncio.sleep(self.ttl / 3)
        self._roles[role] = self._sure_from(asked)
        log.info("%s: this process holds it now", role)

    def may_lead(self, role: str) -> bool:
        """Whether this process surely still holds `role` (see `may_act`)."""
        return clock.monotonic() < self._roles.get(role, 0)

    def health(self) -> dict[str, float]:
        """When each loop last worked (unix seconds): renew, heartbeat, and listen, which
        is the notice connection's last proof of life (made, or a ping answered)."""
        listened = max(self.last_ok.get("listen", 0.0), self.coordination.listening_ok_at)
        return {**self.last_ok, "listen": listened}

    # --- a chat taken by a command-line tool ------------------------------------------
    @contextlib.asynccontextmanager
    async def alone(self, chat_key: str) -> AsyncIterator[Fence | None]:
        """Hold the chat's lease while a tool (`threadline compress`) works on it, renewed
        as a running process would; yields the fence its writes go under, or None when
        a running process holds the chat (the tool must then leave it alone)."""
        if not await self._claim(chat_key):
            yield None
            return
        keeper = asyncio.create_task(self._forever("renew", self.renew), name="tool-renew",
                                     context=contextvars.Context())
        try:
            yield self.fence_of(chat_key)
        finally:
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper
            await self._release(chat_key)
