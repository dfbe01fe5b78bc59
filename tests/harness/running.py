"""A `threadline` command as a real process whose stderr is read line by line as it
arrives, so a test waits on what the gateway says instead of sleeping."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from pathlib import Path
from typing import Any

from tests.harness.cli import THREADLINE, cli_env

USER = 5550037  # who writes to the gateway in `answered`


class Running:
    """One process; `lines` is its stderr so far. Always end it with `stop` or `kill`."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._changed = asyncio.Condition()
        self._ended = False
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def start(cls, home: Path, *args: str, env: dict[str, str] | None = None) -> Running:
        """`threadline ARGS...` with stdin closed (a `run` as systemd starts it)."""
        proc = await asyncio.create_subprocess_exec(
            THREADLINE, *args, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
            cwd=str(home), env=env or cli_env(home))
        return cls(proc)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def log(self) -> str:
        return "\n".join(self.lines)

    def said(self, text: str) -> list[str]:
        """The stderr lines containing `text`."""
        return [line for line in self.lines if text in line]

    async def _read(self) -> None:
        assert self.proc.stderr is not None
        while line := await self.proc.stderr.readline():
            self.lines.append(line.decode(errors="replace").rstrip("\n"))
            async with self._changed:
                self._changed.notify_all()
        async with self._changed:
            self._ended = True
            self._changed.notify_all()

    async def wait_for_line(self, text: str, timeout: float = 30.0) -> str:  # noqa: ASYNC109
        """The first stderr line containing `text`; fails if the process ends without it."""
        try:
            async with asyncio.timeout(timeout), self._changed:
                await self._changed.wait_for(lambda: bool(self.said(text)) or self._ended)
        except TimeoutError:
            raise AssertionError(f"no line with {text!r} within {timeout}s:\n{self.log}") from None
        found = self.said(text)
        assert found, f"ended ({self.proc.returncode}) without a line with {text!r}:\n{self.log}"
        return found[0]

    async def exited(self, timeout: float = 30.0) -> int:  # noqa: ASYNC109
        """Wait for the process to end by itself; killed (and the test failed) if it does not."""
        try:
            await asyncio.wait_for(self.proc.wait(), timeout)
        except TimeoutError:
            await self.kill()
            raise AssertionError(f"still running after {timeout}s:\n{self.log}") from None
        await self._reader
        assert self.proc.returncode is not None
        return self.proc.returncode

    async def stop(self, timeout: float = 40.0) -> int:  # noqa: ASYNC109
        """SIGTERM (when still running) and wait for the exit code."""
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
        return await self.exited(timeout)

    async def kill(self) -> None:
        """SIGKILL: no drain, no clean stop, nothing written on the way out."""
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
        await self.proc.wait()
        await self._reader


async def answered(fake_telegram: Any, text: str, count: int = 1, user: int = USER) -> str:
    """Push `text` from `user` to a running gateway and wait for its answer, the `count`th
    message in that chat: the proof that it is up and taking messages."""
    fake_telegram.push(fake_telegram.updates.private_text(text, user))
    replies = await fake_telegram.wait_for_messages(user, count, timeout=30)
    return replies[count - 1].text
