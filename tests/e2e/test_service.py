"""`threadline run` under a stand-in for systemd: sd_notify readiness, status, watchdog, drain.

A real unix datagram socket plays systemd's notification socket ($NOTIFY_SOCKET); the
gateway runs as a real process against the fake Telegram and the fake OpenAI server.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway.service.app import DRAIN_TIMEOUT_S
from gateway.service.notify import Notifier
from gateway.service.run import EXIT_SECOND_SIGNAL
from tests.harness.cli import THREADLINE, cli_env
from tests.harness.engines import install_plugin
from tests.harness.gateway import write_config

USER = 5550002
REPO = Path(__file__).resolve().parents[2]
WATCHDOG_USEC = 400_000  # pings every 0.2 s
READY = "READY=1"
PING = "WATCHDOG=1"
STOPPING = "STOPPING=1"


class NotifySocket:
    """Systemd's side of sd_notify: a bound datagram socket recording what arrives, when."""

    def __init__(self, path: str) -> None:
        self.address = path
        self.received: list[tuple[float, str]] = []  # (time.monotonic(), datagram)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._changed = asyncio.Condition()
        self._reader: asyncio.Task[None] | None = None

    async def __aenter__(self) -> NotifySocket:
        self._sock.bind(self.address.replace("@", "\0", 1) if self.address[0] == "@"
                        else self.address)
        self._sock.setblocking(False)
        self._reader = asyncio.create_task(self._read())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._reader is not None
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader
        self._sock.close()

    async def _read(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            data = await loop.sock_recv(self._sock, 4096)
            self.received.append((time.monotonic(), data.decode()))
            async with self._changed:
                self._changed.notify_all()

    def times(self, prefix: str) -> list[float]:
        return [at for at, text in self.received if text.startswith(prefix)]

    def texts(self, prefix: str = "") -> list[str]:
        return [text for _, text in self.received if text.startswith(prefix)]

    async def wait_for(self, prefix: str, count: int = 1, timeout: float = 10.0) -> float:  # noqa: ASYNC109
        """Wait for `count` datagrams starting with `prefix`; the arrival time of the last."""
        try:
            async with asyncio.timeout(timeout), self._changed:
                await self._changed.wait_for(lambda: len(self.times(prefix)) >= count)
        except TimeoutError:
            raise AssertionError(f"no {count} x {prefix!r} within {timeout}s; got "
                                 f"{[t for _, t in self.received if t != PING]}") from None
        return self.times(prefix)[count - 1]


@pytest.fixture
async def notify(tmp_path: Path) -> AsyncIterator[NotifySocket]:
    path = tmp_path / "notify.sock"
    if len(str(path)) > 100:  # a unix socket path holds at most 107 bytes
        path = Path(tempfile.mkdtemp(prefix="tl-")) / "notify.sock"
    async with NotifySocket(str(path)) as sock:
        yield sock


def service_config(tmp_path: Path, fake_telegram: Any, fake_openai: Any, *,
                   model_timeout_s: float = 5, **sections: Any) -> str:
    platforms = {"console": {"enabled": False},
                 "telegram": {"enabled": True, "token": fake_telegram.token,
                              "base_url": fake_telegram.base_url,
                              "base_file_url": fake_telegram.base_file_url}}
    model = {"base_url": fake_openai.base_url, "timeout_s": model_timeout_s}
    return str(write_config(tmp_path, model=model, platforms=platforms, **sections))


async def start_service(tmp_path: Path, config: str,
                        notify: NotifySocket) -> asyncio.subprocess.Process:
    """`threadline run` with the environment systemd gives a Type=notify service."""
    # PYTHONPATH: context-engine plugins in these tests import tests.harness.engines.
    env = cli_env(tmp_path, NOTIFY_SOCKET=notify.address, WATCHDOG_USEC=str(WATCHDOG_USEC),
                  PYTHONPATH=str(REPO))
    env.pop("WATCHDOG_PID", None)
    return await asyncio.create_subprocess_exec(
        THREADLINE, "run", "--config", config, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, cwd=str(tmp_path),
        env=env)


async def stop_service(proc: asyncio.subprocess.Process, timeout: float = 40) -> str:  # noqa: ASYNC109
    """SIGTERM (once) and wait; the process's stderr."""
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
    try:
        _, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    return err.decode()


def gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in zip(times, times[1:], strict=False)]


async def test_ready_is_sent_only_once_telegram_answered_the_handshake(
        tmp_path, fake_openai, fake_telegram, notify):
    fake_telegram.delay_next(1.5)  # getMe, the first call, hangs for a while
    proc = await start_service(tmp_path, service_config(tmp_path, fake_telegram, fake_openai),
                               notify)
    try:
        await fake_telegram.wait_for_call("/getMe", timeout=30)
        asked = time.monotonic()
        ready = await notify.wait_for(READY, timeout=30)
        handshake = [c.path.rsplit("/", 1)[1] for c in fake_telegram.calls]
        await notify.wait_for("STATUS=Ready: 0 chats active, 0 turns running")
        await fake_telegram.wait_for_call("/getUpdates")
        fake_telegram.push(fake_telegram.updates.private_text("are you up?", USER))
        [reply] = await fake_telegram.wait_for_messages(USER, 1, timeout=10)
    finally:
        err = await stop_service(proc)
    assert ready - asked >= 1.3, "READY=1 was sent before Telegram answered getMe"
    assert {"getMe", "deleteWebhook"} <= set(handshake)
    assert reply.text == "echo: are you up?"
    assert proc.returncode == 0, err
    assert notify.texts(READY) == [READY]
    assert notify.times(STOPPING)[0] > ready


async def test_watchdog_pings_every_half_period_while_the_loop_is_healthy(
        tmp_path, fake_openai, fake_telegram, notify):
    proc = await start_service(tmp_path, service_config(tmp_path, fake_telegram, fake_openai),
                               notify)
    try:
        ready = await notify.wait_for(READY, timeout=30)
        await asyncio.sleep(1.5)
    finally:
        err = await stop_service(proc)
    assert proc.returncode == 0, err
    pings = [t for t in notify.times(PING) if ready <= t <= ready + 1.5]
    assert len(pings) >= 5  # 0.2 s apart: 7 or 8 in 1.5 s, with room for a slow machine
    assert max(gaps(pings)) < 0.6


async def test_a_blocked_event_loop_stops_the_watchdog_pings_until_it_is_free(
        tmp_path, fake_openai, fake_telegram, notify):
    install_plugin(tmp_path, "blocks-the-loop", "BlocksTheLoop")  # sleeps 2 s on the loop
    config = service_config(tmp_path, fake_telegram, fake_openai,
                            context={"engine": "blocks-the-loop"})
    proc = await start_service(tmp_path, config, notify)
    try:
        await notify.wait_for(READY, timeout=30)
        await notify.wait_for(PING, count=len(notify.times(PING)) + 4)  # a steady beat first
        fake_telegram.push(fake_telegram.updates.private_text("take your time", USER))
        [reply] = await fake_telegram.wait_for_messages(USER, 1, timeout=15)
        seen = len(notify.times(PING))
        await notify.wait_for(PING, count=seen + 3, timeout=3)  # pinging again
    finally:
        err = await stop_service(proc)
    assert proc.returncode == 0, err
    assert reply.text == "echo: take your time"
    pings = [t for t in notify.times(PING) if t <= reply.at]
    longest = max(gaps(pings))
    assert longest >= 1.5, f"pings went on while the loop was blocked (longest gap {longest:.2f}s)"
    assert sorted(gaps(pings))[-2] < 0.6  # the one long gap is the blocked loop, nothing else


async def test_sigterm_says_stopping_and_lets_a_slow_turn_finish_before_exit_0(
        tmp_path, fake_openai, fake_telegram, notify):
    fake_openai.delay_next(3)
    proc = await start_service(tmp_path, service_config(tmp_path, fake_telegram, fake_openai),
                               notify)
    try:
        await notify.wait_for(READY, timeout=30)
        fake_telegram.push(fake_telegram.updates.private_text("slow one", USER))
        await fake_openai.wait_for_call("/chat/completions")
        await notify.wait_for("STATUS=Ready: 1 chat active, 1 turn running", timeout=5)
        signalled = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        stopping = await notify.wait_for(STOPPING, timeout=5)
        await notify.wait_for("STATUS=Stopping: waiting for 1 turn to finish", timeout=5)
        _, out = await asyncio.wait_for(proc.communicate(), DRAIN_TIMEOUT_S + 10)
        err = out.decode()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    exited = time.monotonic()
    [reply] = fake_telegram.messages(USER)
    assert proc.returncode == 0, err
    assert reply.text == "echo: slow one"
    assert stopping - signalled < 1.0  # said at once, not after the drain
    assert stopping < reply.at < exited
    assert exited - signalled < DRAIN_TIMEOUT_S
    assert "Traceback" not in err


async def test_a_second_sigterm_during_a_long_drain_exits_at_once(
        tmp_path, fake_openai, fake_telegram, notify):
    fake_openai.delay_next(120)  # a turn that would outlast the whole drain bound
    config = service_config(tmp_path, fake_telegram, fake_openai, model_timeout_s=120)
    proc = await start_service(tmp_path, config, notify)
    try:
        await notify.wait_for(READY, timeout=30)
        fake_telegram.push(fake_telegram.updates.private_text("never mind", USER))
        await fake_openai.wait_for_call("/chat/completions")
        proc.send_signal(signal.SIGTERM)
        await notify.wait_for(STOPPING, timeout=5)
        await asyncio.sleep(0.5)  # well into the drain
        again = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(proc.communicate(), DRAIN_TIMEOUT_S)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert time.monotonic() - again < 5, "the second signal waited for the drain"
    assert proc.returncode == EXIT_SECOND_SIGNAL, err.decode()
    assert "Traceback" not in err.decode()
    assert fake_telegram.messages(USER) == []


# --- the notifier on its own, against real sockets --------------------------------------

async def test_an_abstract_notify_socket_receives_ready_and_status(notify_abstract):
    notifier = Notifier.from_environment({"NOTIFY_SOCKET": notify_abstract.address})
    notifier.ready()
    notifier.status("Ready: two\nlines")
    notifier.close()
    await notify_abstract.wait_for("STATUS=")
    assert notify_abstract.texts() == [READY, "STATUS=Ready: two lines"]


@pytest.fixture
async def notify_abstract() -> AsyncIterator[NotifySocket]:
    async with NotifySocket(f"@threadline-test-{os.getpid()}-{time.monotonic_ns()}") as sock:
        yield sock


async def test_the_watchdog_belongs_to_the_pid_systemd_named(notify):
    env = {"NOTIFY_SOCKET": notify.address, "WATCHDOG_USEC": "100000"}
    others = Notifier.from_environment({**env, "WATCHDOG_PID": "1"}, pid=4242)
    ours = Notifier.from_environment({**env, "WATCHDOG_PID": "4242"}, pid=4242)
    await asyncio.wait_for(others.watchdog(), 1)  # returns at once: not ours to ping
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(ours.watchdog(), 0.28)  # 0.05 s apart: 5 or 6 pings
    others.close()
    ours.close()
    await notify.wait_for(PING, count=4, timeout=2)


def test_outside_systemd_the_notifier_does_nothing():
    notifier = Notifier.from_environment({"WATCHDOG_USEC": "100000"})
    notifier.ready()
    notifier.stopping()
    assert not notifier.enabled and notifier.watchdog_interval is None
