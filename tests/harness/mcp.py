"""The test MCP server (tests/harness/mcp_server.py) as config entries, over stdio and
over streamable HTTP, and what tests ask of its processes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SERVER = [sys.executable, "-m", "tests.harness.mcp_server"]


def stdio_entry(pidfile: Path, **extra: Any) -> dict[str, Any]:
    """A `tools.mcp` entry starting the test server as a program; `env` knobs in `extra`
    under `env`, other keys (timeout_s, chats, allow, deny) as they are."""
    env = {"MCP_TEST_PIDFILE": str(pidfile), **extra.pop("env", {})}
    return {"command": SERVER, "cwd": str(REPO), "env": env, **extra}


def http_entry(url: str, **extra: Any) -> dict[str, Any]:
    return {"url": url, **extra}


@contextlib.asynccontextmanager
async def http_server(directory: Path, **env: str) -> AsyncIterator[str]:
    """The test server on streamable HTTP in a process of its own; yields its URL."""
    portfile = directory / "mcp-port"
    pidfile = directory / "mcp-http.pid"
    proc = await asyncio.create_subprocess_exec(
        *SERVER, "--http", str(portfile), cwd=str(REPO),
        env={**os.environ, "MCP_TEST_PIDFILE": str(pidfile), **env},
        stdin=asyncio.subprocess.DEVNULL)
    try:
        async with asyncio.timeout(30):
            while not portfile.exists():  # noqa: ASYNC110 - the server writes it when it listens
                if proc.returncode is not None:
                    raise AssertionError(f"the MCP HTTP server exited ({proc.returncode})")
                await asyncio.sleep(0.02)
        yield f"http://127.0.0.1:{portfile.read_text()}/mcp"
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()


def read_pid(pidfile: Path) -> int | None:
    try:
        return int(pidfile.read_text())
    except (OSError, ValueError):
        return None


def alive(pid: int) -> bool:
    """Whether the process exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


def group_alive(pgid: int) -> bool:
    """Whether any process is left in the process group."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return any(alive(int(p.name)) for p in Path("/proc").iterdir() if p.name.isdigit()
               and _pgid(int(p.name)) == pgid)


def _pgid(pid: int) -> int | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return int(fields[2])


def kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
