"""`threadline run` on Discord across stops, outages and refusals (issue 33), as a real
process against the fake Discord and the fake model.

What arrives while the process drains or is down is answered after the restart, once and
in order (`platforms.discord.catch_up_hours`); a long REST outage delays a reply without a
restart; a disallowed intent (close code 4014) ends a Discord-only process with exit 78
and one clear line, and leaves the other platforms running; `threadline doctor` names a
Message Content intent that is off.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from gateway.config import EXIT_CONFIG
from tests.e2e.test_service import NotifySocket
from tests.harness.base import last_user_text
from tests.harness.cli import THREADLINE, cli_env, threadline
from tests.harness.discord_bot import discord_platform
from tests.harness.fake_discord import BOT_ID, FakeDiscord
from tests.harness.gateway import write_config
from tests.harness.waiting import eventually

pytestmark = pytest.mark.timeout(300)
USER = "700000000000000001"
TELEGRAM_USER = 5550033
OUTAGE_S = 120.0  # the outage: far past discord.py's own ~16 s of retries
STOPPING = "STOPPING=1"


class Run:
    """A `threadline run` process; its stderr is read as it comes, so the pipe never fills."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.proc.stderr is not None
        async for line in self.proc.stderr:
            self.lines.append(line.decode(errors="replace").rstrip("\n"))

    @property
    def err(self) -> str:
        return "\n".join(self.lines)

    @property
    def log(self) -> str:
        """The last lines of stderr, for a failure's message."""
        return "\n".join(self.lines[-12:])

    async def exited(self, timeout: float = 60) -> int:  # noqa: ASYNC109
        code = await asyncio.wait_for(self.proc.wait(), timeout)
        await asyncio.wait_for(self._reader, 10)
        return code

    async def stop(self) -> int:
        """SIGTERM (if still running) and wait; a process that hangs is killed."""
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return await self.exited(60)
        except TimeoutError:
            self.proc.kill()
            return await self.exited(10)


async def start(tmp_path: Path, config: str, **env: str) -> Run:
    return Run(await asyncio.create_subprocess_exec(
        THREADLINE, "run", "--config", config, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, cwd=str(tmp_path),
        env=cli_env(tmp_path, **env)))


async def connected(run: Run, fake: FakeDiscord) -> None:
    """Wait for the process's IDENTIFY; a process that exits first fails the test at once."""
    count = fake.identifies + 1
    await eventually(lambda: fake.identifies >= count or run.proc.returncode is not None,
                     timeout=60, what=lambda: run.log)
    if run.proc.returncode is not None:
        code = await run.exited(10)  # and its stderr read to the end
        pytest.fail(f"threadline run exited with {code}:\n{run.log}")


def config_file(tmp_path: Path, fake_discord: FakeDiscord, model_url: str, *,
                telegram: Any = None, **discord: Any) -> str:
    platforms = discord_platform(fake_discord, **discord)
    if telegram is not None:
        platforms["telegram"] = {"enabled": True, "token": telegram.token,
                                 "base_url": telegram.base_url,
                                 "base_file_url": telegram.base_file_url}
    return str(write_config(tmp_path, model={"base_url": model_url}, platforms=platforms,
                            streaming={"enabled": False}))


def replies(fake: FakeDiscord, channel: str) -> list[dict[str, Any]]:
    """The bot's messages in the channel as they stand now, oldest first."""
    return [m for m in fake.history(channel) if m["author"]["id"] == BOT_ID]


def replied_to(fake: FakeDiscord, channel: str) -> list[str]:
    """The user message each of the bot's messages answers (its reply reference)."""
    return [str((m.get("message_reference") or {}).get("message_id"))
            for m in replies(fake, channel)]


def answered(db: Path) -> int:
    """How many ledger rows are answered (all of a reply is with Discord)."""
    if not db.exists():  # connecting would create it
        return 0
    try:
        with contextlib.closing(sqlite3.connect(db)) as conn:
            return conn.execute("SELECT count(*) FROM inbound WHERE status = 'answered'"
                                ).fetchone()[0]
    except sqlite3.Error:  # not created yet, or busy
        return 0


def intent_lines(run: Run) -> list[str]:
    return [line for line in run.lines if "4014" in line or "intent" in line.lower()]


# --- AC3: a drain and a downtime lose nothing and repeat nothing -----------------------


async def test_what_arrives_while_draining_or_down_is_answered_after_restart_once_in_order(
        tmp_path, fake_openai, fake_discord):
    release = asyncio.Event()

    async def answer(body: dict[str, Any]) -> str:
        text = last_user_text(body["messages"])
        if "slow" in text:  # the turn that keeps the first process draining
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(release.wait(), 60)
        return f"echo: {text}"

    fake_openai.responder = answer
    dm = fake_discord.dm_channel(USER)
    config = config_file(tmp_path, fake_discord, fake_openai.base_url)
    address = str(Path(tempfile.mkdtemp(prefix="tl-")) / "notify.sock")
    async with NotifySocket(address) as notify:
        run = await start(tmp_path, config, NOTIFY_SOCKET=address)
        try:
            await connected(run, fake_discord)
            slow = await fake_discord.user_message(dm, "a slow question", author_id=USER)
            await fake_openai.wait_for_call("/chat/completions", timeout=60)
            run.proc.send_signal(signal.SIGTERM)
            await notify.wait_for(STOPPING, timeout=30)  # draining: the websocket is open
            draining = [await fake_discord.user_message(dm, f"sent while draining {n}",
                                                        author_id=USER) for n in range(1, 6)]
            await asyncio.sleep(1.0)  # room for the events to reach the draining process
            release.set()
            assert await run.exited(60) == 0, run.log
        finally:
            release.set()
            await run.stop()
    first_run = [m["id"] for m in replies(fake_discord, dm)]
    down = [await fake_discord.user_message(dm, f"sent while down {n}", author_id=USER,
                                            dispatch=False) for n in range(1, 6)]
    asked = [slow, *draining, *down]
    run = await start(tmp_path, config)
    try:
        await eventually(lambda: answered(tmp_path / "threadline.db") >= len(asked),
                         timeout=90, every=0.1, what=lambda: [m["content"] for m in
                                                              replies(fake_discord, dm)])
        await asyncio.sleep(2)  # room for a repeat, if there were one
    finally:
        code = await run.stop()
    assert code == 0, run.log
    answers, targets = replies(fake_discord, dm), replied_to(fake_discord, dm)
    assert [m["id"] for m in answers][:len(first_run)] == first_run  # kept, not redone
    assert set(targets) <= set(asked), [m["content"] for m in answers]  # replies, all
    assert len(targets) == len(set(targets)), targets  # none answered twice
    assert targets == sorted(targets, key=asked.index), targets  # in the order sent
    # Messages that waited together are answered in one turn (docs/architecture.md,
    # "Coalescing"): the last request to the model holds each of them once, in order.
    texts = ["a slow question", *(f"sent while draining {n}" for n in range(1, 6)),
             *(f"sent while down {n}" for n in range(1, 6))]
    users = [m["content"] for m in fake_openai.calls_to("/chat/completions")[-1].json[
        "messages"] if m["role"] == "user"]
    seen = [t for t in texts for u in users if isinstance(u, str) and t in u]
    assert seen == texts, users
    assert targets[-1] == asked[-1]  # the last reply answers the newest message


async def test_in_a_guild_channel_only_what_mentions_the_bot_is_caught_up(
        tmp_path, fake_openai, fake_discord):
    guild = fake_discord.add_guild()
    channel = fake_discord.add_channel(guild)
    fake_discord.add_member(guild, USER)
    config = config_file(tmp_path, fake_discord, fake_openai.base_url, catch_up_hours=24)
    run = await start(tmp_path, config)
    try:
        await connected(run, fake_discord)
        hello = await fake_discord.user_message(channel, "hello", author_id=USER,
                                                mentions_bot=True)
        await fake_discord.wait_for_messages(channel, 1, timeout=60)
    finally:
        code = await run.stop()
    assert code == 0, run.log
    await fake_discord.user_message(channel, "chatting with friends", author_id=USER,
                                    dispatch=False)
    asked = await fake_discord.user_message(channel, "a question while you were away",
                                            author_id=USER, mentions_bot=True, dispatch=False)
    run = await start(tmp_path, config)
    try:
        await eventually(lambda: len(replies(fake_discord, channel)) >= 2, timeout=60,
                         every=0.1, what=lambda: run.log)
        await asyncio.sleep(2)  # room for an answer to the chatter, if there were one
    finally:
        await run.stop()
    assert replied_to(fake_discord, channel) == [hello, asked]
    assert "a question while you were away" in replies(fake_discord, channel)[1]["content"]


# --- AC4a: a long REST outage --------------------------------------------------------


async def test_a_reply_held_up_by_a_long_rest_outage_arrives_soon_after_without_restart(
        tmp_path, fake_openai, fake_discord):
    dm = fake_discord.dm_channel(USER)
    run = await start(tmp_path, config_file(tmp_path, fake_discord, fake_openai.base_url))
    try:
        await connected(run, fake_discord)
        fake_discord.fail_for("/channels/", 502, OUTAGE_S)  # every send, typing and read
        recovered_at = time.monotonic() + OUTAGE_S
        asked = await fake_discord.user_message(dm, "asked during the outage", author_id=USER)
        await eventually(lambda: any(path.endswith("/messages") for path, _, _
                                     in fake_discord.outage_answers), timeout=60)
        then = await fake_discord.user_message(dm, "asked after it", author_id=USER)
        await eventually(lambda: len(replies(fake_discord, dm)) >= 2,
                         timeout=OUTAGE_S + 60, every=0.2)
        await asyncio.sleep(1.5)  # room for a repeat, if there were one
        assert run.proc.returncode is None, run.log  # no restart
        assert fake_discord.identifies == 1
    finally:
        await run.stop()
    assert replied_to(fake_discord, dm) == [asked, then]
    created = {m.id: m.at for m in fake_discord.messages(dm) if m.via == "channel"}
    first, second = (created[m["id"]] for m in replies(fake_discord, dm))
    assert 0 <= first - recovered_at < 10, f"{first - recovered_at:.1f} s after the outage"
    assert first < second


# --- AC5: close code 4014 (disallowed intents) -----------------------------------------


async def refuse_intents(fake: FakeDiscord) -> float:
    """Discord closes the live connection with 4014 and refuses every new one the same way."""
    fake.refuse_identify(4014)
    closed_at = time.monotonic()
    await fake.close_gateway(4014)
    return closed_at


async def test_a_disallowed_intent_ends_a_discord_only_run_with_78_and_one_clear_line(
        tmp_path, fake_openai, fake_discord):
    dm = fake_discord.dm_channel(USER)
    run = await start(tmp_path, config_file(tmp_path, fake_discord, fake_openai.base_url))
    try:
        await connected(run, fake_discord)
        await fake_discord.user_message(dm, "hello", author_id=USER)
        await fake_discord.wait_for_messages(dm, 1, timeout=60)  # running, mid-run
        closed_at = await refuse_intents(fake_discord)
        try:
            code = await asyncio.wait_for(run.proc.wait(), 30)
        except TimeoutError:
            pytest.fail(f"still running 30 s after close code 4014; log:\n{run.log}")
        elapsed = time.monotonic() - closed_at
    finally:
        await run.stop()
    assert code == EXIT_CONFIG, run.log
    assert elapsed < 5, f"exited {elapsed:.1f} s after the close"
    assert "Traceback" not in run.err, run.err
    assert intent_lines(run), run.log


async def test_with_telegram_too_a_disallowed_intent_leaves_telegram_answering(
        tmp_path, fake_openai, fake_discord, fake_telegram):
    config = config_file(tmp_path, fake_discord, fake_openai.base_url, telegram=fake_telegram)
    run = await start(tmp_path, config)
    try:
        await connected(run, fake_discord)
        fake_telegram.push(fake_telegram.updates.private_text("before", TELEGRAM_USER))
        await fake_telegram.wait_for_messages(TELEGRAM_USER, 1, timeout=60)
        await refuse_intents(fake_discord)
        await eventually(lambda: intent_lines(run), timeout=30, what=lambda: run.log)
        fake_telegram.push(fake_telegram.updates.private_text("after the 4014", TELEGRAM_USER))
        answers = await fake_telegram.wait_for_messages(TELEGRAM_USER, 2, timeout=30)
        assert run.proc.returncode is None, run.log
    finally:
        await run.stop()
    assert answers[1].text == "echo: after the 4014"
    assert "Traceback" not in run.err, run.err


# --- AC6: the doctor and the Message Content intent -------------------------------------


@pytest.mark.parametrize(("enabled", "limited"), [(False, True), (True, True), (True, False)],
                         ids=["off", "on (portal toggle)", "on (verified app)"])
async def test_doctor_names_the_message_content_intent_only_when_it_is_off(
        tmp_path, fake_openai, fake_discord, enabled, limited):
    fake_discord.set_message_content_intent(enabled, limited=limited)
    config = config_file(tmp_path, fake_discord, fake_openai.base_url)
    ran = await threadline("doctor", "--config", config, home=tmp_path, timeout=60)
    assert "Traceback" not in ran.err, ran.err
    named = [line for line in ran.out.splitlines() if "message content" in line.lower()]
    if enabled:
        assert ran.code == 0, ran.out
        assert not [line for line in named if line.startswith("FAIL")], ran.out
    else:
        assert ran.code == 1, ran.out
        assert len(named) == 1 and named[0].startswith("FAIL"), ran.out
