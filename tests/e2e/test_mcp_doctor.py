"""`threadline doctor` and `threadline run` with MCP servers: each server started (or
reached), its tools listed and closed; a broken one is one line naming why, and its
secrets reach neither the doctor's output nor the service's log."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from tests.harness.cli import threadline
from tests.harness.gateway import telegram_run_config
from tests.harness.mcp import alive, http_server, read_pid, stdio_entry
from tests.harness.running import Running

# No redaction pattern knows this shape: only the configured value masks it.
SECRET = "plumcake-7731-zebra-quartz"
# A server that says its token on stderr and exits before it speaks MCP.
BROKEN = {"command": [sys.executable, "-c", "import os, sys; print('starting with', "
                      "os.environ['API_TOKEN'], file=sys.stderr); sys.exit(2)"],
          "env": {"API_TOKEN": SECRET}}


def with_servers(path: str, servers: dict[str, Any]) -> str:
    data = yaml.safe_load(Path(path).read_text())
    Path(path).write_text(yaml.safe_dump({**data, "tools": {"mcp": servers}}))
    return path


async def test_doctor_lists_each_servers_tools_and_says_why_one_fails(
        tmp_path, fake_telegram, fake_openai):
    pidfile = tmp_path / "mcp.pid"
    async with http_server(tmp_path) as url:
        config = with_servers(telegram_run_config(tmp_path, fake_telegram,
                                                  fake_openai.base_url),
                              {"good": stdio_entry(pidfile), "web": {"url": url},
                               "broken": BROKEN, "off": {**BROKEN, "enabled": False}})
        ran = await threadline("doctor", "--config", config, home=tmp_path, timeout=90)

    found = {line[6:18].strip(): line for line in ran.out.strip().splitlines()[:-1]}
    tools = "6 tool(s): add, image, long_text, raise, sleep, weather"
    assert found["mcp good"] == f"ok    mcp good    stdio, {tools}"
    assert found["mcp web"] == f"ok    mcp web     http, {tools}"
    assert found["mcp broken"].startswith("FAIL  mcp broken  stdio: ")
    assert "it exited with code 2" in found["mcp broken"]
    assert "starting with [REDACTED]" in found["mcp broken"]
    assert "mcp off" not in found
    assert ran.code == 1 and ran.out.strip().endswith("1 problem")
    assert SECRET not in ran.out + ran.err and "Traceback" not in ran.err
    server = read_pid(pidfile)
    assert server is not None and not alive(server), "the doctor closed what it started"


async def test_a_failing_servers_secret_stays_out_of_the_service_log(
        tmp_path, fake_telegram, fake_openai):
    config = with_servers(telegram_run_config(tmp_path, fake_telegram, fake_openai.base_url),
                          {"broken": BROKEN})
    run = await Running.start(tmp_path, "run", "--config", config)
    try:
        line = await run.wait_for_line("mcp broken: could not start")
        await run.wait_for_line("Application started")
        code = await run.stop()
    finally:
        await run.kill()
    assert "it exited with code 2" in line and "trying again in 1 s" in line
    assert SECRET not in run.log and "[REDACTED]" in line
    assert code == 0
