"""The test MCP server (tests/harness/mcp_server.py) as config entries, over stdio and
over streamable HTTP, and what tests ask of its processes."""

from __future__ import annotations

import asyncio
import contextlib
import json
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
async def http_server(directory: Path, port: int = 0, **env: str) -> AsyncIterator[str]:
    """The test server on streamable HTTP in a process of its own (on `port`, else a free
    one); yields its URL."""
    portfile = directory / "mcp-port"
    portfile.unlink(missing_ok=True)
    pidfile = directory / "mcp-http.pid"
    proc = await asyncio.create_subprocess_exec(
        *SERVER, "--http", str(portfile), "--port", str(port), cwd=str(REPO),
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


# --- a model scripted to call tools, for either wire format -----------------------------

ASK = "please call "


def asking(body: dict[str, Any]) -> Any:
    """The model: a user message "please call NAME {json}" makes it call NAME once, then
    say "done"; anything else is echoed. Reads OpenAI and Anthropic request bodies."""
    from tests.harness.base import text_of, tool_call_reply

    messages = body["messages"]
    asked = [i for i, m in enumerate(messages)
             if m["role"] == "user" and ASK in text_of(m["content"])]
    if not asked:
        return f"echo: {text_of(messages[-1]['content'])[:40]}"
    if _answered(messages[asked[-1] + 1:]):
        return "done"
    said = text_of(messages[asked[-1]]["content"])  # in a group, after the speaker's name
    name, _, arguments = said[said.index(ASK) + len(ASK):].partition(" ")
    return tool_call_reply(name, json.loads(arguments or "{}"), call_id=f"call_{asked[-1]}")


def _answered(after: list[dict[str, Any]]) -> bool:
    """Whether a tool result came after the ask (an OpenAI tool message, or an Anthropic
    tool_result block)."""
    return any(m["role"] == "tool" or (isinstance(m.get("content"), list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in m["content"]))
        for m in after)


def prefix_kept(bodies: list[dict[str, Any]]) -> tuple[int, int]:
    """(requests that begin with the previous request byte for byte, pairs compared):
    its tools, system and messages, cache markers aside (they move to the newest)."""
    from tests.harness.anthropic_cache import without_markers

    plain = [without_markers(b) for b in bodies]
    kept = 0
    for before, after in zip(plain, plain[1:], strict=False):
        head = before["messages"]
        kept += (json.dumps(after.get("tools")) == json.dumps(before.get("tools"))
                 and after.get("system") == before.get("system")
                 and json.dumps(after["messages"][:len(head)]) == json.dumps(head))
    return kept, max(0, len(plain) - 1)


def requests(fake: Any) -> list[dict[str, Any]]:
    """The chat requests an OpenAI fake answered, in order."""
    return [c.json for c in fake.calls_to("/chat/completions") if c.json]


def offered(body: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools") or []]


async def say_and_wait(platform: Any, text: str, **kw: Any) -> None:
    """Say `text` on a RecordingPlatform and wait until it is answered."""
    done = len(platform.delivered_ids) + 1
    await platform.say(text, **kw)
    await platform.wait_delivered(done, timeout=30)
