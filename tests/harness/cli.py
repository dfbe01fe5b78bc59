"""Running the real `threadline` command in a subprocess."""

from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import dataclass
from pathlib import Path

THREADLINE = str(Path(sys.executable).parent / "threadline")


@dataclass(frozen=True)
class Ran:
    code: int
    out: str
    err: str


def cli_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("THREADLINE")}
    return {**env, "THREADLINE_HOME": str(home), **extra}


async def threadline(*args: str, stdin: str | bytes = "", home: Path,
                     timeout: float = 120,  # noqa: ASYNC109
                     env: dict[str, str] | None = None, umask: int = -1) -> Ran:
    """`umask`: the one the process starts with (-1: this process's)."""
    # Bytes go through untouched so a test can pipe input that is not valid UTF-8.
    data = stdin.encode() if isinstance(stdin, str) else stdin
    proc = await asyncio.create_subprocess_exec(
        THREADLINE, *args, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, cwd=str(home), env=env or cli_env(home), umask=umask)
    try:
        out, err = await asyncio.wait_for(proc.communicate(data), timeout)
    except BaseException:  # a timeout (or a cancelled test) leaves no process behind
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        raise
    assert proc.returncode is not None
    return Ran(proc.returncode, out.decode(), err.decode())
