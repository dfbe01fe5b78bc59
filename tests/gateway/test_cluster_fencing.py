"""A turn whose chat was lost and taken back while its write waited (issue 47, point 5):
the write carries the take it began under, so the store refuses it although the same
process holds the chat again; the stale answer is neither stored nor sent, and the chat's
message is answered once, by a turn under the new take."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

from gateway.wiring import create_gateway
from storage.postgres import PostgresSessionStore
from tests.harness.gateway import close, cluster_member, config_for
from tests.harness.platform import RecordingPlatform
from tests.harness.waiting import eventually

CHAT = "test:1"
LEASE = f"chat:{CHAT}"


async def test_a_turn_whose_chat_was_lost_and_taken_back_meanwhile_stores_and_sends_nothing(
        tmp_path: Path, fake_openai, postgres_url) -> None:
    answers = itertools.count(1)
    fake_openai.responder = lambda body: f"answer {next(answers)}"
    config = config_for(tmp_path, fake_openai.base_url, storage={"url": postgres_url},
                        gateway={"open": True, "coalesce_ms": 0, "lease_seconds": 30})
    platform = RecordingPlatform()
    gw = create_gateway(config, [platform])
    await gw.initialize()
    await gw.start()
    store, cluster = gw.store, gw.cluster
    assert isinstance(store, PostgresSessionStore) and cluster is not None
    waiting, go = asyncio.Event(), asyncio.Event()

    async def hold_the_first_turn(write: str) -> None:
        if write == "record_turn" and not waiting.is_set():
            waiting.set()
            await go.wait()

    store.before_fenced_write = hold_the_first_turn
    other = PostgresSessionStore(postgres_url)
    await other.initialize()
    try:
        await platform.say("hello")
        await asyncio.wait_for(waiting.wait(), 30)  # answered, its write on its way
        # Meanwhile the chat is lost: the lease lapses and another process takes it, this
        # one's renewal finds it gone; then the other lets it go and this one takes it back.
        await other.fetch("UPDATE leases SET expires_at = 0 WHERE name = $1", LEASE)
        taken = await other.coordination.claim(LEASE, "other:1:abc", 30.0)
        assert taken is not None
        await cluster.renew()
        assert not cluster.may_act(CHAT)
        await other.coordination.release(LEASE, "other:1:abc", taken)
        await cluster.offer(CHAT)
        assert cluster.may_act(CHAT)
        go.set()  # the first turn's write goes now, under the take it began with
        await platform.wait_delivered(1, timeout=30)
        await eventually(lambda: not gw.router.busy(CHAT), timeout=30)
        history = await store.load_history((await store.live_session(CHAT)).id)
        [row] = await store.open_inbound(CHAT) or [None]
    finally:
        await other.shutdown()
        await close(gw)
    assert platform.texts() == ["answer 2"]  # the turn under the new take, alone
    assert [m.message["content"] for m in history if m.message["role"] == "assistant"] == [
        "answer 2"]
    assert row is None  # answered, nothing left open


async def test_a_turn_dropped_for_a_lost_chat_is_still_charged_and_holds_nothing(
        tmp_path: Path, fake_openai, postgres_url) -> None:
    """Issue 47, point 9: the model was paid for the dropped turn; its tokens count against
    the user's budget, and its hold does not stand for 15 minutes in the other turns' way."""
    fake_openai.delay_next(3)  # the turn is with the model when its chat moves
    budgets = {"budgets": {"user": {"day": {"tokens": 60_000}}}}  # near: turns hold first
    (a, at_a), (b, at_b) = [await cluster_member(tmp_path / n, fake_openai.base_url,
                                                 postgres_url, **budgets) for n in ("a", "b")]
    assert a.cluster is not None and b.cluster is not None
    try:
        await at_a.say("hello", message_id="30")
        await fake_openai.wait_for_call("/chat/completions", timeout=30)
        [(holds,)] = await a.store.fetch("SELECT count(*) FROM spend_holds")
        assert holds > 0  # the turn holds its estimate while the model answers
        await b.store.fetch("UPDATE leases SET expires_at = 0 WHERE name = $1", LEASE)
        await b.cluster.sweep()
        await a.cluster.renew()
        await at_b.wait_delivered(1, timeout=30)
        await eventually(lambda: len(fake_openai.calls_to("/chat/completions")) == 2)
        await eventually(lambda: not a.router.busy(CHAT), timeout=30)
        holds_after = await a.store.fetch("SELECT count(*) FROM spend_holds")
        usage = await a.store.fetch("SELECT input + output + cache_read + cache_write"
                                    " FROM usage WHERE purpose = 'chat'")
        counters = await a.store.fetch("SELECT tokens FROM spend_counters"
                                       " WHERE key LIKE 'user:%'")
    finally:
        await close(b)
        await close(a)
    assert at_a.texts() == [] and at_b.texts() == ["echo: hello"]
    assert holds_after == [(0,)]
    assert len(usage) == 2  # both calls were made and paid: both are booked
    # The user's day and month counters each hold both calls.
    assert [row[0] for row in counters] == [sum(row[0] for row in usage)] * 2
