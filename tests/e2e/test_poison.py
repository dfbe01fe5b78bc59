"""A message that kills the process is skipped after its second try, and never takes the
other chats down with it again (docs/architecture.md, "Poison messages")."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
from contextlib import closing

from gateway.turns.worker import SKIPPED
from tests.e2e.test_service import REPO, service_config
from tests.harness.cli import THREADLINE, cli_env
from tests.harness.engines import KillsOnMarker, install_plugin

ALICE, BOB = 5550101, 5550102


async def start(tmp_path, config: str) -> asyncio.subprocess.Process:
    # PYTHONPATH: the plugin engine imports tests.harness.engines.
    return await asyncio.create_subprocess_exec(
        THREADLINE, "run", "--config", config, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, cwd=str(tmp_path),
        env=cli_env(tmp_path, PYTHONPATH=str(REPO)))


async def killed(proc: asyncio.subprocess.Process) -> None:
    await asyncio.wait_for(proc.wait(), 60)
    assert proc.returncode == -signal.SIGKILL


def attempts(tmp_path) -> dict[str, tuple[str, int]]:
    with closing(sqlite3.connect(tmp_path / "threadline.db")) as db:
        return {text: (status, tries) for text, status, tries in
                db.execute("SELECT text, status, attempts FROM inbound")}


async def skipped_then_answered(tmp_path, config: str, fake_telegram):
    """Start again: Bob hears the skip, then his next message is answered; stop cleanly.
    Returns the skip, Bob's first two messages and the run's stderr."""
    proc = await start(tmp_path, config)
    try:
        [skipped] = await fake_telegram.wait_for_messages(BOB, 1, timeout=60)
        fake_telegram.push(fake_telegram.updates.private_text("are you there?", BOB))
        replies = await fake_telegram.wait_for_messages(BOB, 2, timeout=60)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(proc.communicate(), 60)
    return skipped, replies, err


async def test_a_message_that_kills_the_process_is_skipped_after_its_second_try(
        tmp_path, fake_openai, fake_telegram):
    install_plugin(tmp_path, "kills-on-marker", "KillsOnMarker")
    config = service_config(tmp_path, fake_telegram, fake_openai,
                            context={"engine": "kills-on-marker"})
    poison = f"please read this {KillsOnMarker.MARKER}"
    first = await start(tmp_path, config)
    try:
        fake_openai.delay_next(30)  # Alice's turn is still with the model ...
        fake_telegram.push(fake_telegram.updates.private_text("hello from Alice", ALICE))
        await fake_openai.wait_for_call("/chat/completions", timeout=30)
        fake_telegram.push(fake_telegram.updates.private_text(poison, BOB))
        await killed(first)  # ... when Bob's message kills the process
    finally:
        if first.returncode is None:
            first.kill()
    assert fake_telegram.messages(ALICE) == [] and fake_telegram.messages(BOB) == []
    assert attempts(tmp_path)[poison] == ("taken", 1)

    # After the restart, Alice (who wrote first) is served before Bob's message runs again.
    second = await start(tmp_path, config)
    try:
        [to_alice] = await fake_telegram.wait_for_messages(ALICE, 1, timeout=60)
        await killed(second)
    finally:
        if second.returncode is None:
            second.kill()
    assert to_alice.text == "echo: hello from Alice"
    assert fake_telegram.messages(BOB) == []
    assert attempts(tmp_path)[poison] == ("taken", 2)

    skipped, replies, err = await skipped_then_answered(tmp_path, config, fake_telegram)
    assert skipped.text == SKIPPED
    assert replies[1].text == "echo: are you there?"
    assert [m.text for m in fake_telegram.messages(ALICE)] == ["echo: hello from Alice"]
    assert attempts(tmp_path)[poison] == ("failed", 2)
    assert b"skipping it" in err and b"Traceback" not in err


async def test_a_kill_while_the_skip_is_being_sent_still_says_it_once(
        tmp_path, fake_openai, fake_telegram):
    install_plugin(tmp_path, "kills-on-marker", "KillsOnMarker")
    config = service_config(tmp_path, fake_telegram, fake_openai,
                            context={"engine": "kills-on-marker"})
    poison = f"please read this {KillsOnMarker.MARKER}"
    fake_telegram.push(fake_telegram.updates.private_text(poison, BOB))
    for _ in range(2):  # two turns on it, each killing the process
        proc = await start(tmp_path, config)
        await killed(proc)
    assert attempts(tmp_path)[poison] == ("taken", 2)

    # The third start skips it, and is killed while Telegram is down for its answer.
    fake_telegram.fail_method_for("sendMessage", 502, 600)
    sends = len(fake_telegram.calls_to("/sendMessage"))
    third = await start(tmp_path, config)
    try:
        await fake_telegram.wait_for_call("/sendMessage", sends + 1, timeout=60)
    finally:
        third.kill()
        await third.wait()
    assert fake_telegram.messages(BOB) == []
    fake_telegram.fail_method_for("sendMessage", 502, 0)  # back up

    skipped, replies, _ = await skipped_then_answered(tmp_path, config, fake_telegram)
    assert skipped.text == SKIPPED
    assert [m.text for m in replies] == [SKIPPED, "echo: are you there?"]
    assert attempts(tmp_path)[poison] == ("failed", 2)
