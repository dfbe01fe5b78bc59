"""A real MCP server for the tests, written with the SDK's server API (MCPServer).

Run as a program: `python -m tests.harness.mcp_server` serves over stdio;
`--http PORTFILE` serves streamable HTTP on 127.0.0.1 at a free port (or `--port N`),
written to PORTFILE once it listens. Knobs come from the environment, so a test can disagree with the gateway:

- MCP_TEST_PIDFILE: the server writes its pid there when it starts (a test kills it, or
  checks that nothing of it is left).
- MCP_TEST_START_DELAY: seconds to wait before serving (a slow server at startup).
- MCP_TEST_HOLD: a file; while it exists the server waits before serving (a test keeps a
  restarted server down until it removes the file).
- MCP_TEST_CHILD: when set, the server starts a child process in its own process group
  that outlives nothing (a helper an operator's server might spawn); its pid goes to
  MCP_TEST_PIDFILE + ".child".
- MCP_TEST_SECRET: an environment value the server may be given (tests check it is masked).

Tools: add, long_text, image, raise, sleep, echo_structured.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from mcp.server.mcpserver import Image, MCPServer
from PIL import Image as Pillow

LONG_LINE = "The quick brown fox jumps over the lazy dog near the quiet river bank. "
RED = (200, 30, 30)

server = MCPServer("threadline-test")


@server.tool(description="Add two numbers.")
def add(a: float, b: float) -> str:
    return f"{a + b:g}"


@server.tool(description="Return a long text of about `chars` characters.")
def long_text(chars: int = 60_000) -> str:
    text = (LONG_LINE * (chars // len(LONG_LINE) + 1))[:chars]
    return f"BEGIN {text} END"


@server.tool(description="Return a small red picture.")
def image() -> Image:
    buffer = io.BytesIO()
    Pillow.new("RGB", (40, 30), RED).save(buffer, format="PNG")
    return Image(data=buffer.getvalue(), format="png")


@server.tool(name="raise", description="Always fails.")
def fail(reason: str = "the flux capacitor is cold") -> str:
    raise RuntimeError(reason)


@server.tool(description="Sleep for `seconds`, then say so.")
async def sleep(seconds: float) -> str:
    _mark("sleeping")  # a test waits for this to know the call is in flight
    await asyncio.sleep(seconds)
    return f"slept {seconds:g} s"


@server.tool(description="Return a structured record.", structured_output=True)
def weather(city: str) -> dict[str, object]:
    return {"city": city, "celsius": 21, "sky": "clear"}


def _mark(suffix: str) -> None:
    pidfile = os.environ.get("MCP_TEST_PIDFILE")
    if pidfile:
        Path(f"{pidfile}.{suffix}").write_text(str(os.getpid()))


def _port_file(portfile: str, port: int) -> None:
    Path(portfile + ".tmp").write_text(str(port))
    os.replace(portfile + ".tmp", portfile)  # whole or absent: the test polls for it


def _startup() -> None:
    pidfile = os.environ.get("MCP_TEST_PIDFILE")
    if pidfile:
        Path(pidfile).write_text(str(os.getpid()))
        if os.environ.get("MCP_TEST_CHILD"):
            # A helper in the server's own process group (not a new session): the gateway
            # must stop it with the server.
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                                     stdin=subprocess.DEVNULL)
            Path(pidfile + ".child").write_text(str(child.pid))
    delay = float(os.environ.get("MCP_TEST_START_DELAY") or 0)
    if delay:
        time.sleep(delay)
    hold = os.environ.get("MCP_TEST_HOLD")
    while hold and Path(hold).exists():
        time.sleep(0.05)


async def _serve_http(portfile: str, port: int) -> None:
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    app = server.streamable_http_app()
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    http = uvicorn.Server(config)
    _port_file(portfile, sock.getsockname()[1])
    await http.serve(sockets=[sock])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", metavar="PORTFILE")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    _startup()
    if args.http:
        asyncio.run(_serve_http(args.http, args.port))
    else:
        server.run("stdio")


if __name__ == "__main__":
    main()
