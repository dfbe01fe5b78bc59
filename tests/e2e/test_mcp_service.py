"""`threadline run` with an MCP server over stdio: SIGTERM while one of its tools is
running lets the turn finish within the drain, then stops the server with its whole
process group, so nothing of it is left (issue 39, point 4)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.service.app import DRAIN_TIMEOUT_S
from tests.harness.gateway import telegram_run_config
from tests.harness.mcp import ASK, alive, asking, group_alive, read_pid, stdio_entry
from tests.harness.running import USER, Running
from tests.harness.waiting import eventually

pytestmark = pytest.mark.timing  # kills and time bounds: `make test-loaded` runs it
TIMEOUT_S = 4.0


def run_config(tmp_path: Path, fake_telegram: Any, model_url: str, entry: dict[str, Any]
               ) -> str:
    """`threadline run` on the fake Telegram, with the test server as MCP server `test`."""
    path = telegram_run_config(tmp_path, fake_telegram, model_url)
    data = yaml.safe_load(Path(path).read_text())
    Path(path).write_text(yaml.safe_dump({**data, "tools": {"mcp": {"test": entry}}}))
    return path


async def test_sigterm_with_a_tool_call_in_flight_leaves_no_server_process(
        tmp_path, fake_telegram, fake_openai):
    fake_openai.responder = asking
    pidfile = tmp_path / "mcp.pid"
    entry = stdio_entry(pidfile, timeout_s=TIMEOUT_S, chats=["telegram:*"],
                        env={"MCP_TEST_CHILD": "1"})  # a helper in its process group
    config = run_config(tmp_path, fake_telegram, fake_openai.base_url, entry)
    run = await Running.start(tmp_path, "run", "--config", config)
    try:
        await run.wait_for_line("mcp test: up")
        server, child = read_pid(pidfile), read_pid(pidfile.with_name("mcp.pid.child"))
        assert server is not None and child is not None and alive(server) and alive(child)

        fake_telegram.push(fake_telegram.updates.private_text(
            f"{ASK}test__sleep {json.dumps({'seconds': 60})}", USER))
        await eventually(pidfile.with_name("mcp.pid.sleeping").exists, timeout=30)
        began = time.monotonic()
        code = await run.stop(timeout=DRAIN_TIMEOUT_S + 15)
        took = time.monotonic() - began
    finally:
        await run.kill()

    assert code == 0, run.log
    assert took < DRAIN_TIMEOUT_S, f"the stop took {took:.1f} s"
    # The turn finished in the drain: the call ran into its timeout and the model answered.
    [reply] = await fake_telegram.wait_for_messages(USER, 1, timeout=5)
    assert reply.text == "done"
    result = fake_openai.calls_to("/chat/completions")[-1].json["messages"][-1]
    assert result["content"] == f"Error: test__sleep did not finish within {TIMEOUT_S:g} seconds."
    # Nothing of the server is left: neither it, nor the helper in its group.
    assert not alive(server) and not alive(child)
    assert not group_alive(server)
