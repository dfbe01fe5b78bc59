"""Commands with several processes on one PostgreSQL database (issue 47, points 6 and 7),
two gateways in one test, each a cluster member with its own pool, leases and notices:
/stop sent to the process that does not hold the chat stops the turn where it runs; a
command queued at a process that then loses its chat is run once, by the new holder."""

from __future__ import annotations

import asyncio
from pathlib import Path

from gateway.turns.worker import STOPPED
from tests.harness.gateway import close, cluster_member
from tests.harness.waiting import eventually

CHAT = "test:1"


async def test_stop_sent_to_the_other_process_stops_the_turn_where_it_runs(
        tmp_path: Path, fake_openai, postgres_url) -> None:
    fake_openai.delay_next(20)  # the turn is still with the model when /stop comes
    (a, at_a), (b, at_b) = [await cluster_member(tmp_path / n, fake_openai.base_url, postgres_url)
                            for n in ("a", "b")]
    try:
        await at_a.say("write me a long story", message_id="10")
        await fake_openai.wait_for_call("/chat/completions", timeout=30)
        await at_b.say("/stop", message_id="11")  # the balancer sent it to the other one
        await at_a.wait_delivered(2, timeout=30)
        await asyncio.sleep(0.5)  # room for an answer that should not come
    finally:
        await close(b)
        await close(a)
    assert at_b.texts() == []  # not "Nothing to stop." from a process running nothing
    assert sorted(at_a.texts()) == sorted(["Stopping.", STOPPED]), at_a.texts()
    assert set(at_a.delivered_ids) == {"10", "11"}


async def test_a_command_queued_where_the_chat_was_lost_runs_once_at_its_new_holder(
        tmp_path: Path, fake_openai, postgres_url) -> None:
    fake_openai.delay_next(3)  # the turn before the command is with the model meanwhile
    (a, at_a), (b, at_b) = [await cluster_member(tmp_path / n, fake_openai.base_url, postgres_url)
                            for n in ("a", "b")]
    assert a.cluster is not None and b.cluster is not None
    try:
        await at_a.say("hello", message_id="20")
        await at_a.say("/status", message_id="21")  # queued at a behind the turn
        await fake_openai.wait_for_call("/chat/completions", timeout=30)
        # a pauses past its lease: the lease expires, b takes the chat over (a sweep),
        # and a's next renewal finds it gone.
        await b.store.fetch("UPDATE leases SET expires_at = 0 WHERE name = $1", f"chat:{CHAT}")
        await b.cluster.sweep()
        await a.cluster.renew()
        assert b.cluster.may_act(CHAT) and not a.cluster.may_act(CHAT)
        await at_b.wait_delivered(2, timeout=30)
        await eventually(lambda: not a.router.busy(CHAT), timeout=30)  # a's queue ran out
        await asyncio.sleep(0.5)
    finally:
        await close(b)
        await close(a)
    assert at_a.texts() == []  # neither the dropped turn nor the command it queued
    assert at_b.texts()[0] == "echo: hello" and at_b.texts()[1].startswith("Model:")
    assert len(at_b.texts()) == 2
