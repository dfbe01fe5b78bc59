"""The store while the service runs: CLI commands and backups beside `threadline run`
never fail, never cost a reply, and the backup is whole."""

from __future__ import annotations

import asyncio
import signal
import sqlite3

from tests.harness.cli import THREADLINE, cli_env, threadline
from tests.harness.gateway import write_config

CHATS, PER_CHAT = 20, 10  # 200 messages


async def test_cli_commands_and_backups_beside_a_busy_service_all_succeed(
        tmp_path, fake_openai, fake_telegram):
    config = str(write_config(tmp_path, model={"base_url": fake_openai.base_url},
                              platforms={"console": {"enabled": False}, "telegram": {
                                  "enabled": True, "token": fake_telegram.token,
                                  "base_url": fake_telegram.base_url,
                                  "base_file_url": fake_telegram.base_file_url}}))
    service = await asyncio.create_subprocess_exec(
        THREADLINE, "run", "--config", config, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=str(tmp_path),
        env=cli_env(tmp_path))
    users = [5_600_000 + i for i in range(CHATS)]
    backup = tmp_path / "backups" / "threadline.db"
    backup.parent.mkdir()
    failures: list[str] = []
    done = asyncio.Event()

    async def beside() -> int:
        rounds = 0
        while not done.is_set():
            for args in (("sessions", "list"), ("sessions", "search", "message"),
                         ("backup", str(backup))):
                ran = await threadline(*args, "--config", config, home=tmp_path, timeout=60)
                if ran.code != 0 or "locked" in ran.err:
                    failures.append(f"{args}: {ran.code} {ran.err.strip()}")
            rounds += 1
        return rounds

    async def chat(user: int) -> None:
        for n in range(PER_CHAT):
            fake_telegram.push(fake_telegram.updates.private_text(f"message {n}", user))
            await fake_telegram.wait_for_messages(user, n + 1, timeout=60)

    try:
        await fake_telegram.wait_for_call("/getUpdates", timeout=30)
        commands = asyncio.create_task(beside())
        await asyncio.gather(*(chat(u) for u in users))
        done.set()
        rounds = await commands
    finally:
        service.send_signal(signal.SIGTERM)
        await asyncio.wait_for(service.wait(), 60)
    err = (await service.stderr.read()).decode()
    assert service.returncode == 0, err
    assert failures == [] and rounds >= 2
    for user in users:
        assert [m.text for m in fake_telegram.messages(user)] == [
            f"echo: message {n}" for n in range(PER_CHAT)]
    copy = sqlite3.connect(backup)
    try:
        assert copy.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert copy.execute("SELECT count(*) FROM inbound").fetchone()[0] > 0
    finally:
        copy.close()


async def test_run_refuses_a_damaged_database_in_one_line_and_leaves_it_alone(tmp_path):
    config = write_config(tmp_path, model={"base_url": "http://127.0.0.1:9/v1"})
    db = tmp_path / "threadline.db"
    garbage = b"this was a database once\x00" * 400
    db.write_bytes(garbage)
    ran = await threadline("run", "--config", str(config), home=tmp_path, timeout=60)
    lines = ran.err.strip().splitlines()
    assert ran.code == 1
    assert len(lines) == 1 and str(db) in lines[0] and "damaged" in lines[0], ran.err
    assert db.read_bytes() == garbage
