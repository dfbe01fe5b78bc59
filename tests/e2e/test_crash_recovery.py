"""kill -9 during compaction: the chain stays consistent and no inbound message is lost."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sqlite3
from pathlib import Path

import pytest

from tests.harness.cli import THREADLINE, cli_env, threadline
from tests.harness.gateway import is_summary_request, summarizing_responder, write_config

# Twenty starts of `chat`: a busy machine makes each slower, so the bound is generous.
pytestmark = [pytest.mark.timing, pytest.mark.timeout(600)]

TRIALS = 20
CHAT = "console:local"


def check_chain(db_path: Path) -> None:
    db = sqlite3.connect(db_path)
    try:
        sessions = db.execute("SELECT id, parent_session_id, kind, end_reason FROM sessions "
                              "WHERE chat_key = ?", (CHAT,)).fetchall()
        live = [s for s in sessions if s[3] is None]
        assert len(live) == 1, f"expected one live tip, found {live}"
        [(current,)] = db.execute("SELECT session_id FROM chats WHERE chat_key = ?", (CHAT,))
        ids = {s[0]: s for s in sessions}
        while ids[current][3] == "compression":  # follow the chain from the chat's pointer
            [child] = [s for s in sessions if s[1] == current and s[2] == "compression"]
            current = child[0]
        assert current == live[0][0], "the chat resolves to its live tip"
        for sid, parent, kind, end_reason in sessions:
            count = db.execute("SELECT count(*) FROM messages WHERE session_id = ?",
                               (sid,)).fetchone()[0]
            if kind == "compression":
                assert count > 0, f"half-written continuation {sid}"
                assert ids[parent][3] == "compression"
            if end_reason == "compression":
                children = [s for s in sessions if s[1] == sid and s[2] == "compression"]
                assert len(children) == 1, f"{sid} ended by compression has {children}"
        lost = db.execute("SELECT i.text FROM inbound i WHERE i.status != 'pending' AND NOT "
                          "EXISTS (SELECT 1 FROM messages m WHERE m.id = i.message_row_id)"
                          ).fetchall()
        assert lost == [], f"inbound taken but missing from history: {lost}"
    finally:
        db.close()


def compactions(db_path: Path) -> int:
    if not db_path.exists():
        return 0
    db = sqlite3.connect(db_path)
    try:
        return db.execute("SELECT count(*) FROM sessions WHERE kind = 'compression'"
                          ).fetchone()[0]
    except sqlite3.OperationalError:  # no schema yet
        return 0
    finally:
        db.close()


async def one_trial(config: str, home: Path, fake, trial: int, rng: random.Random) -> None:
    before = compactions(home / "threadline.db")
    proc = await asyncio.create_subprocess_exec(
        THREADLINE, "chat", "--config", config, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL, cwd=str(home),
        env=cli_env(home))
    assert proc.stdin is not None
    filler = "some longer words to fill the small context window quickly " * 6
    for i in range(8):
        proc.stdin.write(f"trial {trial} line {i} {filler}\n".encode())
    await proc.stdin.drain()
    seen = len([c for c in fake.calls if is_summary_request(c.json)])
    deadline = asyncio.get_running_loop().time() + 20
    # Polls two things at once (a new summary call, or the process ending by itself).
    while (len([c for c in fake.calls if is_summary_request(c.json)]) == seen  # noqa: ASYNC110
           and proc.returncode is None and asyncio.get_running_loop().time() < deadline):
        await asyncio.sleep(0.005)
    if trial % 2:
        # Every other trial lets the compaction land first, so the chain grows however
        # slow the machine is, and the kill hits the turns after it.
        while (compactions(home / "threadline.db") <= before  # noqa: ASYNC110
               and proc.returncode is None
               and asyncio.get_running_loop().time() < deadline):
            await asyncio.sleep(0.02)
    await asyncio.sleep(rng.uniform(0.0, 0.12))  # somewhere in or around the compaction
    if proc.returncode is None:
        os.kill(proc.pid, signal.SIGKILL)
    await proc.wait()


async def test_sigkill_during_compaction_leaves_a_consistent_chain(tmp_path, fake_openai):
    rng = random.Random(7731)

    fake_openai.responder = summarizing_responder
    config = str(write_config(tmp_path, model={"base_url": fake_openai.base_url,
                                               "context_length": 2048,
                                               "max_output_tokens": 256},
                              compression={"protect_last_n": 4}))
    db_path = tmp_path / "threadline.db"
    for trial in range(TRIALS):
        # Summaries take a little while, so kills land inside them as well as around them.
        fake_openai.delay_next(rng.uniform(0.0, 0.05), times=3)
        await one_trial(config, tmp_path, fake_openai, trial, rng)
        check_chain(db_path)
    ran = await threadline("chat", "--config", config, stdin="final line\n", home=tmp_path)
    assert ran.code == 0, ran.err
    check_chain(db_path)
    db = sqlite3.connect(db_path)
    open_rows = db.execute("SELECT count(*) FROM inbound WHERE status IN ('pending', 'taken')"
                           ).fetchone()[0]
    db.close()
    assert open_rows == 0, "every stored message was answered after the restart"
    assert compactions(db_path) >= TRIALS // 2
