"""Continuation chains through the real CLI: a long console chat on a small window."""

from __future__ import annotations

import json
import sqlite3

from storage.postgres import PostgresSessionStore
from tests.harness.cli import threadline
from tests.harness.gateway import summarizing_responder, write_config

SMALL_WINDOW = {"context_length": 2048, "max_output_tokens": 256}


def lines(count: int) -> list[str]:
    filler = "and here is some more detail about this numbered step " * 5
    return [f"Message {i:02d} with code WORD{i:02d}X: {filler}" for i in range(count)]


async def test_sixty_message_console_chat_compacts_into_a_chain(tmp_path, fake_openai):
    fake_openai.responder = summarizing_responder
    config = str(write_config(tmp_path, model={"base_url": fake_openai.base_url, **SMALL_WINDOW},
                              compression={"protect_last_n": 4}))
    said = lines(30)
    ran = await threadline("chat", "--config", config, stdin="\n".join(said) + "\n",
                           home=tmp_path, timeout=120)
    assert ran.code == 0, ran.err
    assert len(ran.out.splitlines()) >= 30

    sessions = json.loads((await threadline("sessions", "list", "--json", "--config", config,
                                            home=tmp_path)).out)
    by_id = {s["id"]: s for s in sessions}
    [root] = [s for s in sessions if s["parent_session_id"] is None]
    continuations = [s for s in sessions if s["parent_session_id"] is not None]
    assert len(continuations) >= 2, "a 60-message chat on a 2K window compacts several times"
    for child in continuations:
        parent = by_id[child["parent_session_id"]]
        assert child["kind"] == "compression"
        assert parent["end_reason"] == "compression"
        assert child["started_at"] >= parent["ended_at"]
    live = [s for s in sessions if s["end_reason"] is None]
    assert len(live) == 1

    tip = await threadline("sessions", "tip", root["id"], "--config", config, home=tmp_path)
    assert tip.out.strip() == live[0]["id"]

    db = sqlite3.connect(tmp_path / "threadline.db")
    stored = {row[0] for row in db.execute("SELECT content FROM messages WHERE role='user'")}
    assert set(said) <= stored, "every original user message is still stored"
    for i in (0, 13, 29):
        found = await threadline("sessions", "search", f"WORD{i:02d}X", "--config", config,
                                 home=tmp_path)
        assert f"WORD{i:02d}X" in found.out
    summaries = [c for c in fake_openai.calls_to("/chat/completions")
                 if "handoff checkpoint" in str(c.json["messages"][0]["content"])]
    assert len(summaries) >= 2


async def test_compress_in_the_console_and_from_the_shell(tmp_path, fake_openai):
    fake_openai.responder = summarizing_responder
    config = str(write_config(tmp_path, model={"base_url": fake_openai.base_url,
                                               "context_length": 4096},
                              compression={"protect_last_n": 4}))
    short = await threadline("chat", "--config", config, stdin="hi\n/compress\n",
                             home=tmp_path)
    assert short.out.splitlines()[1].startswith("Nothing to compress yet")
    assert len(fake_openai.calls_to("/chat/completions")) == 1

    await threadline("chat", "--config", config, stdin="\n".join(lines(8)) + "\n",
                     home=tmp_path)
    typed = await threadline("chat", "--config", config,
                             stdin="/compress the WORD03X step\n", home=tmp_path)
    assert "Compressed:" in typed.out and "Rough estimate: ~" in typed.out, typed.out
    summary = [c for c in fake_openai.calls_to("/chat/completions")
               if "handoff checkpoint" in str(c.json["messages"][0]["content"])][-1]
    assert "the WORD03X step" in str(summary.json["messages"])

    await threadline("chat", "--config", config, stdin="\n".join(lines(8)) + "\n",
                     home=tmp_path)
    shell = await threadline("compress", "console:local", "--focus", "WORD05X",
                             "--config", config, home=tmp_path)
    assert shell.code == 0 and "Compressed:" in shell.out, shell
    sessions = json.loads((await threadline("sessions", "list", "--json", "--config", config,
                                            home=tmp_path)).out)
    assert sum(1 for s in sessions if s["kind"] == "compression") >= 2


async def test_compress_from_the_shell_on_postgresql_takes_the_chat_or_refuses(
        tmp_path, fake_openai, postgres_url):
    """Issue 47, point 2: on a database several processes share, the shell command takes
    the chat's lease for its compaction (it used to be fenced out as a member that never
    claimed one, after paying for the summary), and while a running process holds the
    chat it refuses in one sentence before any model call."""
    fake_openai.responder = summarizing_responder
    config = str(write_config(tmp_path, model={"base_url": fake_openai.base_url,
                                               "context_length": 4096},
                              compression={"protect_last_n": 4},
                              storage={"url": postgres_url}))
    talked = await threadline("chat", "--config", config, stdin="\n".join(lines(8)) + "\n",
                              home=tmp_path)
    assert talked.code == 0, talked.err
    calls = len(fake_openai.calls_to("/chat/completions"))

    async with PostgresSessionStore(postgres_url) as store:
        held = await store.coordination.claim("chat:console:local", "host:1:abc", 60.0)
        assert held is not None  # a running gateway process answering the chat
        refused = await threadline("compress", "console:local", "--config", config,
                                   home=tmp_path)
        assert refused.code == 1 and "held by a running gateway" in refused.err, refused
        assert len(refused.err.strip().splitlines()) == 1, refused.err
        assert len(fake_openai.calls_to("/chat/completions")) == calls  # nothing was asked
        await store.coordination.release("chat:console:local", "host:1:abc", held)

    shell = await threadline("compress", "console:local", "--focus", "WORD05X",
                             "--config", config, home=tmp_path)
    assert shell.code == 0 and "Compressed:" in shell.out, shell
    async with PostgresSessionStore(postgres_url) as store:
        [live] = [s for s in await store.list_sessions("console:local") if s.live]
        assert live.kind == "compression"
        con_rows = await store.fetch("SELECT count(*) FROM leases")
    assert con_rows[0][0] == 0  # the shell command gave the chat back
