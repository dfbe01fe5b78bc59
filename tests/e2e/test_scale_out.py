"""Several `threadline run` processes on one PostgreSQL: each message answered once, each chat
in order, a killed process's chats taken over (issue 18, acceptance 2-4)."""

from __future__ import annotations

import asyncio
import random
import re

import asyncpg
import pytest

from tests.harness.cluster import (
    Instance,
    answered,
    post,
    rows,
    start_instance,
    stop_all,
    user_texts,
)
from tests.harness.gateway import summarizing_responder
from tests.harness.media import b64, jpeg

pytestmark = pytest.mark.timing  # `make test-loaded` runs it with the CPUs busy

CHATS = 100
PER_CHAT = 10
FIRST_USER = 7_000_000
LEASE = 3.0
MODEL_S = 0.4


def _text(chat: int, k: int) -> str:
    return f"c{chat} m{k}"


async def _check_once_and_in_order(fake_telegram, fake_openai, db_url: str, *,
                                   killed: bool = False, chats: int = CHATS,
                                   per_chat: int = PER_CHAT) -> None:
    # A kill between Telegram taking a chunk and the ledger marking it sent cannot be told
    # from a kill before the send: that chunk goes once more, and the ledger says
    # `maybe_sent` (docs/architecture.md, "Sending"). Only those may show twice.
    maybe = {int(r[0]) for r in await rows(
        db_url, "SELECT i.message_id FROM deliveries AS d JOIN inbound AS i"
        " ON i.id = d.inbound_id WHERE d.maybe_sent = 1")} if killed else set()
    for chat in range(chats):
        user = FIRST_USER + chat
        expected = [_text(chat, k) for k in range(per_chat)]
        assert await user_texts(db_url, f"telegram:{user}") == expected, chat
        ours = fake_telegram.messages(user)
        replies = [m.reply_to for m in ours]
        # One reply per turn, each to a later message: nothing answered twice or backwards.
        # (On failure: each reply's text and time, to tell a resent chunk from a turn run
        # twice.)
        once = [r for i, r in enumerate(replies)
                if not (r in maybe and i and replies[i - 1] == r)]
        assert once == sorted(set(replies)) and replies, (
            chat, [(m.reply_to, m.message_id, round(m.at, 3), m.text[:60]) for m in ours])
    _every_request_holds_its_history(fake_openai)
    calls = len(fake_openai.calls_to("/chat/completions"))
    sent = len(fake_telegram.messages()) - len(maybe)
    # Every model answer was sent once; only turns cut off by the kill asked for nothing.
    assert 0 <= calls - sent <= (CHATS if killed else 0), (calls, sent)


def _every_request_holds_its_history(fake_openai) -> None:
    """Each model request carries every earlier message of its chat: a process that took a
    chat over never answers from the history it cached before another process moved on."""
    stale = []
    for call in fake_openai.calls_to("/chat/completions"):
        said = " ".join(str(m.get("content")) for m in call.json["messages"]
                        if m.get("role") == "user")
        asked = re.findall(r"c(\d+) m(\d+)", said)
        if not asked:
            continue
        chat, last = asked[-1][0], int(asked[-1][1])
        missing = [k for k in range(last) if f"c{chat} m{k}" not in said]
        if missing:
            stale.append((chat, last, missing))
    assert not stale, f"{len(stale)} requests missed earlier messages: {stale[:5]}"


async def _send_all(fake_telegram, instances: list[Instance], *, kill_at: int | None = None,
                    rng: random.Random | None = None) -> None:
    """1,000 updates over 100 chats, round-robin over chats; over the processes in turn,
    or each to a random one (`rng`)."""
    for n in range(CHATS * PER_CHAT):
        if n == kill_at:
            instances[1].proc.kill()  # SIGKILL, halfway
            await instances[1].proc.wait()
        chat = n % CHATS
        update = fake_telegram.updates.private_text(_text(chat, n // CHATS), FIRST_USER + chat)
        target = rng.randrange(len(instances)) if rng else n % len(instances)
        await post(fake_telegram, instances, target, update)


async def _three(tmp_path, fake_telegram, fake_openai, postgres_url,
                 lease: float = LEASE) -> list[Instance]:
    # A turn takes the model this long: a chat's next message (100 posts later, at another
    # process) arrives while its last turn is still running somewhere.
    fake_openai.answer_delay_s = MODEL_S
    return list(await asyncio.gather(*(
        start_instance(tmp_path / f"p{i}", fake_telegram, fake_openai.base_url, postgres_url,
                       lease_seconds=lease) for i in range(3))))


# Short leases: chats move between processes all the time (idle releases); long ones:
# every message at a process other than the holder goes by notice (issue 34, point 1).
@pytest.mark.parametrize("lease", [LEASE, 30.0])
async def test_three_webhook_processes_answer_every_message_once_in_order(
        tmp_path, fake_telegram, fake_openai, postgres_url, lease) -> None:
    instances = await _three(tmp_path, fake_telegram, fake_openai, postgres_url, lease)
    try:
        await _send_all(fake_telegram, instances, rng=random.Random(3400 + int(lease)))
        total = CHATS * PER_CHAT
        await _all_answered(postgres_url, total)
        await asyncio.sleep(1.0)  # room for a duplicate to show up, if there were one
    finally:
        await stop_all(instances)
    await _check_once_and_in_order(fake_telegram, fake_openai, postgres_url)
    for instance in instances:
        assert "Traceback" not in instance.log(), instance.log()


async def test_a_killed_process_leaves_no_message_unanswered_or_answered_twice(
        tmp_path, fake_telegram, fake_openai, postgres_url) -> None:
    instances = await _three(tmp_path, fake_telegram, fake_openai, postgres_url)
    try:
        await _send_all(fake_telegram, instances, kill_at=CHATS * PER_CHAT // 2)
        total = CHATS * PER_CHAT
        # The dead process's chats move on once their leases expire (a few heartbeats).
        await _all_answered(postgres_url, total)
        await asyncio.sleep(1.0)
    finally:
        await stop_all(instances)
    await _check_once_and_in_order(fake_telegram, fake_openai, postgres_url, killed=True)


async def _all_answered(db_url: str, total: int, timeout: float = 60.0) -> None:  # noqa: ASYNC109
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while (done := await answered(db_url)) < total:
        if loop.time() > deadline:
            left = await rows(db_url, "SELECT id, chat_key, message_id, status, attempts"
                              " FROM inbound WHERE status <> 'answered' ORDER BY id LIMIT 5")
            leases = await rows(db_url, "SELECT name, holder FROM leases")
            raise AssertionError(f"{done} of {total} answered after {timeout:.0f} s; open:"
                                 f" {[tuple(r) for r in left]}; leases {len(leases)}:"
                                 f" {[tuple(r) for r in leases[:5]]}")
        await asyncio.sleep(0.25)


async def _poller(instances: list[Instance], db_url: str) -> Instance:
    """The instance holding the poll lease, once one does."""
    for _ in range(300):
        try:
            found = await rows(db_url, "SELECT holder FROM leases WHERE name = 'poll:telegram'")
        except asyncpg.UndefinedTableError:  # nobody has created the schema yet
            found = []
        if found:
            pid = int(found[0][0].split(":")[1])
            return next(i for i in instances if i.proc.pid == pid)
        await asyncio.sleep(0.1)
    raise AssertionError("nobody took the poll lease")


async def test_polling_runs_one_poller_and_the_other_takes_over_when_it_dies(
        tmp_path, fake_telegram, fake_openai, postgres_url) -> None:
    instances = list(await asyncio.gather(*(
        start_instance(tmp_path / name, fake_telegram, fake_openai.base_url, postgres_url,
                       mode="polling", lease_seconds=LEASE) for name in ("a", "b"))))
    chats, per_chat = 5, 8
    try:
        poller = await _poller(instances, postgres_url)
        for k in range(per_chat):
            if k == per_chat // 2:
                await _all_answered(postgres_url, chats * k)
                poller.proc.kill()
                await poller.proc.wait()
            for chat in range(chats):
                fake_telegram.push(fake_telegram.updates.private_text(_text(chat, k),
                                                                      FIRST_USER + chat))
        # The other process polls within a lease or so, and answers what was left.
        await _all_answered(postgres_url, chats * per_chat, timeout=6 * LEASE)
        await asyncio.sleep(1.0)
        standby = next(i for i in instances if i is not poller)
        assert await _poller(instances, postgres_url) is standby
    finally:
        await stop_all(instances)
    assert fake_telegram.poll_conflicts == 0  # never two getUpdates at once
    assert "standing by" in standby.log()
    await _check_once_and_in_order(fake_telegram, fake_openai, postgres_url, killed=True,
                                   chats=chats, per_chat=per_chat)


async def _no_chat_held(db_url: str, timeout: float = 60.0) -> None:  # noqa: ASYNC109
    """Wait until every process gave its chats up (idle for a lease)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while (await rows(db_url, "SELECT count(*) FROM leases WHERE name LIKE 'chat:%'"))[0][0]:
        assert loop.time() < deadline, "chat leases still held"
        await asyncio.sleep(0.2)


async def test_a_chat_that_moves_between_processes_is_answered_with_its_whole_history(
        tmp_path, fake_telegram, fake_openai, postgres_url) -> None:
    """Each round, every chat writes once to a random process, after every process gave
    the chats up: a chat comes back to a process that answered it rounds ago, whose cached
    agent and live session miss what the others answered since (issue 34, point 1)."""
    rng = random.Random(3401)
    chats, rounds = 20, 6
    fake_openai.answer_delay_s = 0.05
    instances = list(await asyncio.gather(*(
        start_instance(tmp_path / f"p{i}", fake_telegram, fake_openai.base_url, postgres_url,
                       lease_seconds=LEASE) for i in range(3))))
    try:
        for k in range(rounds):
            for chat in range(chats):
                update = fake_telegram.updates.private_text(_text(chat, k), FIRST_USER + chat)
                await post(fake_telegram, instances, rng.randrange(3), update)
            await _all_answered(postgres_url, chats * (k + 1))
            await _no_chat_held(postgres_url)
    finally:
        await stop_all(instances)
    await _check_once_and_in_order(fake_telegram, fake_openai, postgres_url, chats=chats,
                                   per_chat=rounds)


async def test_a_picture_sent_through_one_process_is_shown_to_the_model_by_another(
        tmp_path, fake_telegram, fake_openai, postgres_url) -> None:
    """Each process keeps files in its own directory; the picture reaches the model from
    the other process once the chat moved, read from the database (issue 34, point 6)."""
    a, b = await asyncio.gather(*(
        start_instance(tmp_path / name, fake_telegram, fake_openai.base_url, postgres_url,
                       lease_seconds=LEASE, model={"vision": True}) for name in ("a", "b")))
    user, photo = FIRST_USER + 900, jpeg(3)
    file_id = fake_telegram.add_file(photo, kind="photo", suffix=".jpg")
    try:
        await post(fake_telegram, [a, b], 0,
                   fake_telegram.updates.photo("what is this?", user_id=user, file_id=file_id))
        await _all_answered(postgres_url, 1)
        await _no_chat_held(postgres_url)  # the chat is free: b takes it
        await post(fake_telegram, [a, b], 1,
                   fake_telegram.updates.private_text("and its colour?", user))
        await _all_answered(postgres_url, 2)
    finally:
        await stop_all([a, b])
    first, second = fake_openai.calls_to("/chat/completions")
    assert first.json["messages"] != second.json["messages"]
    pictures = [part["image_url"]["url"] for m in second.json["messages"]
                if isinstance(m.get("content"), list) for part in m["content"]
                if part.get("type") == "image_url"]
    assert pictures == [f"data:image/jpeg;base64,{b64(photo)}"]
    # b answered the second turn: its directory holds the picture only by fetching it.
    [at_a], [at_b] = ([p.read_bytes() for p in (tmp_path / home).glob("attachments/*/*")]
                      for home in ("a", "b"))
    assert at_a == at_b == photo


async def _turns_at(fake_telegram, db_url: str, instance: Instance, user: int,
                    texts: list[str]) -> None:
    """Each text at `instance`, one after the other, then until the chat is free again."""
    for text in texts:
        done = await answered(db_url)
        await post(fake_telegram, [instance], 0,
                   fake_telegram.updates.private_text(text, user))
        await _all_answered(db_url, done + 1)
    await _no_chat_held(db_url)


async def test_compress_at_a_process_that_answered_the_chat_long_ago_keeps_the_transcript(
        tmp_path, fake_telegram, fake_openai, postgres_url) -> None:
    """a answers a chat, b answers more of it, then /compress goes to a, whose cached agent
    misses b's turns: the continuation holds the transcript's own messages, in order
    (issue 34, point 2)."""
    fake_openai.responder = summarizing_responder
    a, b = await asyncio.gather(*(
        start_instance(tmp_path / name, fake_telegram, fake_openai.base_url, postgres_url,
                       lease_seconds=LEASE, model={"context_length": 2048},
                       compression={"protect_last_n": 4})
        for name in ("a", "b")))
    user = FIRST_USER + 950
    said = [f"{_text(0, k)} {'words to make the transcript long enough ' * 8}"
            for k in range(8)]
    try:
        await _turns_at(fake_telegram, postgres_url, a, user, said[:4])
        await _turns_at(fake_telegram, postgres_url, b, user, said[4:])
        await _turns_at(fake_telegram, postgres_url, a, user, ["/compress"])
    finally:
        await stop_all([a, b])
    assert "Compressed" in fake_telegram.messages(user)[-1].text, fake_telegram.messages(user)
    # The last compaction is /compress's (the turns before may have compacted too).
    [(parent, child)] = await rows(
        postgres_url, "SELECT parent_session_id, id FROM sessions WHERE chat_key = $1"
        " AND kind = 'compression' ORDER BY started_at DESC LIMIT 1", f"telegram:{user}")
    transcript = await _contents(postgres_url, parent)
    kept = [c for c in await _contents(postgres_url, child) if c in transcript]
    # Head and tail verbatim: each once, in the transcript's order, ending with its end.
    assert kept == sorted(set(kept), key=transcript.index), kept
    assert kept[-2:] == transcript[-2:] and kept[-2] == said[7], kept


async def _contents(db_url: str, session_id: str) -> list[str]:
    found = await rows(db_url, "SELECT content FROM messages WHERE session_id = $1"
                       " AND role IN ('user', 'assistant') ORDER BY seq", session_id)
    return [str(r[0]) for r in found]
