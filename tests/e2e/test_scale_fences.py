"""Replies on their way when the ground moves (issue 47, points 3 and 4), with real
`threadline run` processes on a real PostgreSQL: a holder paused in the middle of a
five-part reply, and while a one-part reply waits out the chat's pause, sends nothing the
new holder sent once it wakes; a database stopped for longer than the lease while replies
go out to ten chats shows no part twice and loses none."""

from __future__ import annotations

import asyncio
import re
import signal

import pytest

from tests.e2e.test_scale_out import _all_answered, _text
from tests.harness.cluster import Instance, post, rows, start_instance, stop_all
from tests.harness.waiting import eventually

pytestmark = pytest.mark.timing  # `make test-loaded` runs it with the CPUs busy

FIRST_USER = 7_400_000
LEASE = 5.0
PAUSED_S = 12.0
NO_STREAMING = {"enabled": False}  # each part is one sendMessage
ROOMY = {"max_output_tokens": 8000, "context_length": 64000}  # five parts fit one answer


def _reply(parts: int, tag: str) -> str:
    """A reply that Telegram's 4,096-character limit splits into `parts` messages, each
    paragraph saying which part it is."""
    filler = " ".join(["word"] * 700)  # 3,500 characters
    return "\n\n".join(f"[{tag} part {n}] {filler}" for n in range(1, parts + 1))


def _responder(parts: dict[str, int]):
    def answer(body: dict) -> str:
        said = str(body["messages"][-1].get("content"))
        tag = re.search(r"c\d+ m\d+", said)
        key = tag.group(0) if tag else said
        return _reply(parts.get(key, 1), key)
    return answer


def _shown(fake_telegram, user: int) -> list[str]:
    """Which part each of the bot's messages in the chat carries, in the order shown."""
    return [found.group(0) for m in fake_telegram.messages(user)
            if (found := re.match(r"\[[^\]]+\]", m.text))]


async def _rate_limited(fake_telegram, retry_after: float) -> None:
    """The next sendMessage (whichever chat it is for) gets a 429; returns once answered."""
    fake_telegram.rate_limit_next(retry_after)
    await eventually(lambda: fake_telegram.failures_left("sendMessage") == 0, timeout=60)


async def test_a_holder_paused_mid_reply_sends_nothing_the_new_holder_sent(
        tmp_path, fake_telegram, fake_openai, postgres_url) -> None:
    long_user, short_user = FIRST_USER, FIRST_USER + 1
    fake_openai.responder = _responder({_text(0, 0): 5, _text(1, 0): 1})
    instances = list(await asyncio.gather(*(
        start_instance(tmp_path / f"p{i}", fake_telegram, fake_openai.base_url, postgres_url,
                       lease_seconds=LEASE, model=ROOMY,
                       streaming=NO_STREAMING) for i in range(2))))
    holder: Instance = instances[0]
    try:
        # The short reply's one part meets a 429 and waits out the chat's pause.
        await post(fake_telegram, instances, 0,
                   fake_telegram.updates.private_text(_text(1, 0), short_user))
        await fake_openai.wait_for_call("/chat/completions", 1, timeout=60)
        await _rate_limited(fake_telegram, 8.0)
        # The long reply: two parts out, the third meets a 429 (its pause, then its pace).
        await post(fake_telegram, instances, 0,
                   fake_telegram.updates.private_text(_text(0, 0), long_user))
        await fake_telegram.wait_for_messages(long_user, 2, timeout=60)
        await _rate_limited(fake_telegram, 3.0)
        holder.proc.send_signal(signal.SIGSTOP)
        shown_at_stop = (_shown(fake_telegram, long_user), _shown(fake_telegram, short_user))
        try:  # its leases lapse; the other process takes both chats and finishes them
            await fake_telegram.wait_for_messages(long_user, 5, timeout=60)
            await fake_telegram.wait_for_messages(short_user, 1, timeout=60)
            await asyncio.sleep(max(0.0, PAUSED_S - LEASE))
        finally:
            holder.proc.send_signal(SIGCONT)
        # Woken, its pauses run out and its sends ask first: nothing more is shown.
        await eventually(lambda: "dropped" in holder.log() or "lost the lease" in holder.log(),
                         timeout=60, what=lambda: holder.log()[-2000:])
        await asyncio.sleep(8.0 + 2.0)  # past the short reply's pause, and a pace more
        await _all_answered(postgres_url, 2)
    finally:
        await stop_all(instances)
    assert shown_at_stop == ([f"[{_text(0, 0)} part {n}]" for n in (1, 2)], []), shown_at_stop
    assert _shown(fake_telegram, long_user) == [f"[{_text(0, 0)} part {n}]" for n in range(1, 6)]
    assert _shown(fake_telegram, short_user) == [f"[{_text(1, 0)} part 1]"]
    for instance in instances:
        assert "Traceback" not in instance.log(), instance.log()[-3000:]


SIGCONT = signal.SIGCONT


@pytest.mark.timeout(240)
async def test_a_database_stopped_longer_than_the_lease_mid_reply_repeats_and_loses_nothing(
        tmp_path, fake_telegram, fake_openai, own_postgres) -> None:
    db_url = await own_postgres.fresh_database()
    chats, parts = 10, 3
    fake_openai.responder = _responder({_text(chat, 0): parts for chat in range(chats)})
    instances = list(await asyncio.gather(*(
        start_instance(tmp_path / f"p{i}", fake_telegram, fake_openai.base_url, db_url,
                       lease_seconds=LEASE, model=ROOMY,
                       streaming=NO_STREAMING) for i in range(2))))
    try:
        # Each part is in the chat at once and answered a little late: the replies are
        # on their way, some answered and some not, when the database stops.
        fake_telegram.late_answer_next("sendMessage", 0.3, times=chats * parts)
        for chat in range(chats):
            await post(fake_telegram, instances, chat % 2,
                       fake_telegram.updates.private_text(_text(chat, 0), FIRST_USER + 10 + chat))
        await eventually(lambda: len(fake_telegram.calls_to("sendMessage")) >= chats,
                         timeout=60)
        await asyncio.to_thread(own_postgres.halt)
        await asyncio.sleep(LEASE * 2.5)
        await asyncio.to_thread(own_postgres.resume)
        await _all_answered(db_url, chats, timeout=120)
        await asyncio.sleep(2.0)  # room for a part sent twice
        maybe = await rows(db_url, "SELECT count(*) FROM deliveries WHERE maybe_sent = 1")
    finally:
        await stop_all(instances)
    for chat in range(chats):
        user = FIRST_USER + 10 + chat
        sends = [(round(c.at, 3), (c.form or {}).get("text", "")[:16]) for c in
                 fake_telegram.calls_to("sendMessage") if (c.form or {}).get("chat_id") == str(user)]
        assert _shown(fake_telegram, user) == [
            f"[{_text(chat, 0)} part {n}]" for n in range(1, parts + 1)], (chat, sends)
    assert maybe == [(0,)]  # nothing even looked as if it might have gone twice
    for instance in instances:
        assert "Traceback" not in instance.log(), instance.log()[-3000:]
