"""`threadline trajectories compress` as a user runs it: a progress bar on a terminal and
none in a pipe (issue 16, point 5), and a run on the real local model (point 6)."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import pty
import struct
import termios

import pytest

from tests.harness.cli import THREADLINE, cli_env, threadline
from tests.harness.gateway import write_config
from tests.harness.trajectories import write_entries

SUMMARY = ("## Active Task\nFinish the generated task.\n## Goal\nComplete the numbered task "
           "with the tools at hand.\n## Completed Actions\n1. Called the tools several times; "
           "their results were long lists of words.\n## Critical Context\nNothing secret.")
SECTION = {"trajectories": {"target_max_tokens": 3000, "summary_target_tokens": 200}}


async def on_a_terminal(*args: str, home, timeout: float = 60) -> tuple[int, str]:  # noqa: ASYNC109
    """Run with stderr on a pseudo-terminal; (exit code, what the terminal showed)."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    proc = await asyncio.create_subprocess_exec(
        THREADLINE, *args, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=follower, cwd=str(home), env=cli_env(home))
    os.close(follower)
    shown = bytearray()
    loop = asyncio.get_running_loop()

    def read() -> None:
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:
                return
            if not chunk:
                return
            shown.extend(chunk)

    reader = loop.run_in_executor(None, read)
    await asyncio.wait_for(proc.wait(), timeout)
    await asyncio.wait_for(reader, 5)
    os.close(leader)
    return proc.returncode or 0, shown.decode(errors="replace")


async def test_a_progress_bar_on_a_terminal_and_silence_in_a_pipe(tmp_path, fake_openai):
    fake_openai.responder = lambda body: SUMMARY
    config = write_config(tmp_path, model={"base_url": fake_openai.base_url}, **SECTION)
    write_entries(tmp_path / "in.jsonl", 12)
    code, shown = await on_a_terminal("trajectories", "compress", "in.jsonl", "out.jsonl",
                                      "--config", str(config), home=tmp_path)
    assert code == 0, shown
    assert "12/12" in shown and "entry/s" in shown and "<" in shown  # done, rate, ETA
    piped = await threadline("trajectories", "compress", "in.jsonl", "out2.jsonl",
                             "--config", str(config), home=tmp_path)
    assert piped.code == 0 and piped.err == ""
    assert "12 entries:" in piped.out and "compressed" in piped.out


@pytest.mark.model
@pytest.mark.timeout(600)
async def test_five_entries_on_the_real_local_model(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("trajectories: {target_max_tokens: 1500, summary_target_tokens: 160}\n")
    made = write_entries(tmp_path / "in.jsonl", 5, words=60, short_every=100)
    ran = await threadline("trajectories", "compress", "in.jsonl", "out.jsonl", "--config",
                           str(config), home=tmp_path, timeout=540)
    assert ran.code == 0, ran.err
    out = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [e["id"] for e in out] == [e["id"] for e in made]
    totals = json.loads((tmp_path / "out.metrics.json").read_text())
    assert totals["entries"] == 5 and totals["compressed"] + totals["failed"] == 5
    assert "5 entries:" in ran.out
