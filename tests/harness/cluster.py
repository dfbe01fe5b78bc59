"""Several real `threadline run` processes on one PostgreSQL database, talking to the fake
Telegram, for the scale-out tests (docs/scale-out.md)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg

from tests.harness.cli import THREADLINE, cli_env
from tests.harness.fake_telegram import FakeTelegram
from tests.harness.fixtures import free_port
from tests.harness.gateway import write_config

SECRET = "cluster-secret"
PUBLIC_URL = "https://bot.example.com/tg"  # what Telegram would call, through a balancer


@dataclass
class Instance:
    proc: asyncio.subprocess.Process
    home: Path
    port: int

    @property
    def webhook(self) -> str:
        return f"http://127.0.0.1:{self.port}/tg"

    @property
    def alive(self) -> bool:
        return self.proc.returncode is None

    def log(self) -> str:
        return (self.home / "stderr.log").read_text(errors="replace")


async def start_instance(home: Path, fake: FakeTelegram, model_url: str, db_url: str, *,
                         mode: str = "webhook", lease_seconds: float = 3.0,
                         model: dict[str, Any] | None = None, **sections: Any) -> Instance:
    await asyncio.to_thread(home.mkdir, parents=True, exist_ok=True)
    port = free_port()
    telegram: dict[str, Any] = {"enabled": True, "token": fake.token, "base_url": fake.base_url,
                                "base_file_url": fake.base_file_url, "mode": mode}
    if mode == "webhook":
        telegram["webhook"] = {"url": PUBLIC_URL, "listen": "127.0.0.1", "port": port,
                               "secret_token": SECRET}
    config = write_config(home, model={"base_url": model_url, **(model or {})},
                          storage={"url": db_url},
                          gateway={"open": True, "coalesce_ms": 0,
                                   "lease_seconds": lease_seconds},
                          platforms={"console": {"enabled": False}, "telegram": telegram},
                          **sections)
    with (home / "stderr.log").open("wb") as err:
        proc = await asyncio.create_subprocess_exec(
            THREADLINE, "run", "--config", str(config), stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL, stderr=err, cwd=str(home), env=cli_env(home))
    instance = Instance(proc, home, port)
    if mode == "webhook":
        await _listening(instance)
    return instance


async def _listening(instance: Instance, timeout: float = 60.0) -> None:  # noqa: ASYNC109
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        if not instance.alive:
            raise AssertionError(f"threadline exited early:\n{instance.log()}")
        with contextlib.suppress(OSError):
            _, writer = await asyncio.open_connection("127.0.0.1", instance.port)
            writer.close()
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"the webhook of {instance.home} never listened:\n{instance.log()}")


async def post(fake: FakeTelegram, instances: list[Instance], first: int,
               update: dict[str, Any]) -> None:
    """POST the update as a load balancer would: to `first`, else the next live one."""
    for step in range(len(instances)):
        target = instances[(first + step) % len(instances)]
        if not target.alive:
            continue
        with contextlib.suppress(aiohttp.ClientConnectionError):
            if await fake.post_update(target.webhook, update, SECRET) == 200:
                return
    raise AssertionError("no instance took the update")


async def stop_all(instances: list[Instance]) -> None:
    for instance in instances:
        if instance.alive:
            instance.proc.send_signal(signal.SIGTERM)
    for instance in instances:
        try:
            await asyncio.wait_for(instance.proc.wait(), 40)
        except TimeoutError:
            instance.proc.kill()
            await instance.proc.wait()


async def rows(db_url: str, sql: str, *args: Any) -> list[Any]:
    con = await asyncpg.connect(db_url)
    try:
        return list(await con.fetch(sql, *args))
    finally:
        await con.close()


async def answered(db_url: str) -> int:
    [row] = await rows(db_url, "SELECT COUNT(*) FROM inbound WHERE status = 'answered'")
    return int(row[0])


async def user_texts(db_url: str, chat_key: str) -> list[str]:
    """What the chat's sessions hold from the user, line by line, in the order stored."""
    found = await rows(db_url, "SELECT m.content FROM messages AS m JOIN sessions AS s"
                       " ON s.id = m.session_id WHERE s.chat_key = $1 AND m.role = 'user'"
                       " ORDER BY m.id", chat_key)
    return [line for row in found for line in (row[0] or "").splitlines() if line]
