"""An MCP server that dies, fails or is slow: its tools leave the requests while it is
down, it is started again with growing pauses, they come back byte for byte, and no turn
waits on it longer than the tool's timeout (issue 39, point 3)."""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from typing import Any

import pytest

from agent.tools.mcp.connection import PROBE_S
from tests.harness.fixtures import free_port
from tests.harness.gateway import close, config_for, started_gateway
from tests.harness.mcp import (
    ASK,
    alive,
    asking,
    http_server,
    kill,
    offered,
    read_pid,
    requests,
    say_and_wait,
    stdio_entry,
)
from tests.harness.platform import RecordingPlatform
from tests.harness.waiting import eventually

pytestmark = pytest.mark.timing  # kills and time bounds: `make test-loaded` runs it
TIMEOUT_S = 5.0


def mcp_tools(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for t in body.get("tools") or [] if t["function"]["name"].startswith("test__")]


async def test_a_killed_server_leaves_the_requests_and_comes_back(tmp_path, fake_openai):
    fake_openai.responder = asking
    pidfile, hold = tmp_path / "mcp.pid", tmp_path / "hold"
    entry = stdio_entry(pidfile, timeout_s=TIMEOUT_S, chats=["test:*"],
                        env={"MCP_TEST_HOLD": str(hold)})
    platform = RecordingPlatform()
    gw = await started_gateway(config_for(tmp_path, fake_openai.base_url,
                                          tools={"mcp": {"test": entry}}), [platform])
    connection = gw.conversations.mcp.connections["test"]  # type: ignore[union-attr]
    try:
        await say_and_wait(platform, f"{ASK}test__add {json.dumps({'a': 1, 'b': 2})}")
        before = requests(fake_openai)[-1]
        first = read_pid(pidfile)
        assert first is not None and alive(first)

        # Killed with a call in flight: the call ends at once, in words, not at its timeout.
        hold.touch()  # its next start waits until the test lets it go
        sleeping = pidfile.with_name("mcp.pid.sleeping")
        done = len(platform.delivered_ids) + 1
        began = time.monotonic()
        await platform.say(f"{ASK}test__sleep {json.dumps({'seconds': 60})}")
        await eventually(sleeping.exists, timeout=30)
        kill(first)
        await platform.wait_delivered(done, timeout=30)
        took = time.monotonic() - began
        cut_short = requests(fake_openai)[-1]

        # Down: a turn now is offered none of its tools and does not wait for it.
        await eventually(lambda: connection.state != "up", timeout=10)
        await say_and_wait(platform, "hello while it is down")
        while_down = requests(fake_openai)[-1]

        hold.unlink()
        await eventually(lambda: connection.state == "up", timeout=30)
        second = read_pid(pidfile)
        await say_and_wait(platform, f"{ASK}test__add {json.dumps({'a': 2, 'b': 2})}")
        after = requests(fake_openai)[-1]

        # Killed while idle: its program's end is noticed at once, not at the next probe.
        hold.touch()
        assert second is not None
        kill(second)
        await eventually(lambda: connection.state != "up", timeout=PROBE_S / 3)
    finally:
        await close(gw)

    assert took < TIMEOUT_S, f"the turn waited {took:.1f} s for a dead server"
    assert cut_short["messages"][-1]["content"] == (
        "Error: test__sleep: the MCP server went away during the call; try again in a moment.")
    assert mcp_tools(before) and mcp_tools(while_down) == []
    assert "history_search" in offered(while_down)
    assert second is not None and second != first and connection.starts == 2
    # Back as they were, byte for byte: the cached prefix holds across the restart.
    assert json.dumps(after["tools"]) == json.dumps(before["tools"])
    assert after["messages"][-1]["content"] == "4"


async def test_a_server_that_cannot_start_is_tried_again_with_growing_pauses(
        tmp_path, fake_openai, caplog):
    caplog.set_level(logging.WARNING, logger="agent.tools.mcp.connection")
    entry = {"command": [sys.executable, "-c", "import sys; print('no such thing', "
                         "file=sys.stderr); raise SystemExit(3)"], "chats": ["test:*"]}
    platform = RecordingPlatform()
    began = time.monotonic()
    gw = await started_gateway(config_for(tmp_path, fake_openai.base_url,
                                          tools={"mcp": {"broken": entry}}), [platform])
    started_in = time.monotonic() - began
    connection = gw.conversations.mcp.connections["broken"]  # type: ignore[union-attr]
    try:
        await say_and_wait(platform, "hello")  # answered without its tools
        await eventually(lambda: connection.starts >= 4, timeout=30)
    finally:
        await close(gw)

    pauses = [float(m) for m in re.findall(r"trying again in ([\d.]+) s", caplog.text)]
    assert pauses[:3] == [1.0, 2.0, 4.0]
    assert "could not start" in caplog.text and "it exited with code 3" in caplog.text
    assert "no such thing" in caplog.text  # its last words, from its stderr
    assert started_in < 10, "the gateway started without waiting for it"
    assert len(platform.texts("test:1")) == 1
    assert [t for t in offered(requests(fake_openai)[0]) if t.startswith("broken__")] == []


async def test_a_slow_server_does_not_hold_up_the_start_and_its_tools_join_later(
        tmp_path, fake_openai):
    from gateway.mcp.hub import STARTUP_WAIT_S

    fake_openai.responder = asking
    entry = stdio_entry(tmp_path / "mcp.pid", chats=["test:*"],
                        env={"MCP_TEST_START_DELAY": str(STARTUP_WAIT_S + 4)})
    platform = RecordingPlatform()
    began = time.monotonic()
    gw = await started_gateway(config_for(tmp_path, fake_openai.base_url,
                                          tools={"mcp": {"test": entry}}), [platform])
    started_in = time.monotonic() - began
    connection = gw.conversations.mcp.connections["test"]  # type: ignore[union-attr]
    try:
        await say_and_wait(platform, "hello before it is ready")
        early = requests(fake_openai)[-1]
        await eventually(lambda: connection.state == "up", timeout=60)
        await say_and_wait(platform, f"{ASK}test__add {json.dumps({'a': 1, 'b': 1})}")
        later = requests(fake_openai)[-1]
    finally:
        await close(gw)

    assert started_in < STARTUP_WAIT_S + 3
    assert mcp_tools(early) == [] and early["messages"][-1]["content"]
    assert later["messages"][-1]["content"] == "2"


async def test_a_remote_server_down_at_the_start_and_gone_later_is_reached_again(
        tmp_path, fake_openai):
    fake_openai.responder = asking
    port = free_port()
    entry = {"url": f"http://127.0.0.1:{port}/mcp", "chats": ["test:*"]}
    platform = RecordingPlatform()
    gw = await started_gateway(config_for(tmp_path, fake_openai.base_url,
                                          tools={"mcp": {"web": entry}}), [platform])
    connection = gw.conversations.mcp.connections["web"]  # type: ignore[union-attr]
    ask_add = f"{ASK}web__add {json.dumps({'a': 1, 'b': 2})}"
    try:
        await say_and_wait(platform, "hello, nobody listens yet")
        nobody = requests(fake_openai)[-1]
        async with http_server(tmp_path, port):
            await eventually(lambda: connection.state == "up", timeout=30)
            await say_and_wait(platform, ask_add)
            up = requests(fake_openai)[-1]
        # Gone: the next call finds out, says so, and the tools leave until it is back.
        await say_and_wait(platform, ask_add)
        failed = requests(fake_openai)[-1]
        await eventually(lambda: connection.state != "up", timeout=10)
        await say_and_wait(platform, "hello again")
        gone = requests(fake_openai)[-1]
        async with http_server(tmp_path, port):
            await eventually(lambda: connection.state == "up", timeout=60)
            await say_and_wait(platform, ask_add)
            back = requests(fake_openai)[-1]
    finally:
        await close(gw)

    assert [t for t in offered(nobody) if t.startswith("web__")] == []
    assert up["messages"][-1]["content"] == "3"
    assert failed["messages"][-1]["content"] == (
        "Error: web__add: the MCP server went away during the call; try again in a moment.")
    assert [t for t in offered(gone) if t.startswith("web__")] == []
    assert back["messages"][-1]["content"] == "3"
    assert json.dumps(back["tools"]) == json.dumps(up["tools"])
