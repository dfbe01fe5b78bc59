"""`threadline migrate` copies a SQLite store into PostgreSQL whole: the same tips, search
hits and /usage answers on both sides (issue 18, acceptance 5)."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from agent.attachments.files import AttachmentFiles
from storage.base import SessionStore
from storage.models import Compaction, OutChunk, TurnRecord, UsageRecord
from storage.postgres import PostgresSessionStore
from storage.sqlite import SqliteSessionStore
from tests.e2e.test_service import service_config
from tests.harness.cli import THREADLINE, cli_env, threadline
from tests.harness.gateway import close, config_for, started_gateway, write_config
from tests.harness.platform import RecordingPlatform
from tests.harness.store import msg

CHAINS = 100


def _spend_keys(chat: int) -> tuple[str, ...]:
    return (f"chat:test:{chat}:m2026-11", "bot:m2026-11")


def _turn(chat: int, step: int, compact: bool) -> TurnRecord:
    usage = (UsageRecord("fake-model", "chat", input_tokens=100 + chat, output_tokens=step + 1,
                         cache_read_tokens=chat % 7, usd=0.001 * chat,
                         spend_keys=_spend_keys(chat)),
             UsageRecord("summary-model", "summary", input_tokens=chat, output_tokens=2))
    compaction = (Compaction(messages=(msg("system", "be brief"),
                                       msg("user", f"summary {chat}.{step} otter{chat}")),
                             engine_state={"previous_summary": f"s{chat}.{step}"})
                  if compact else None)
    return TurnRecord(before=(msg("user", f"question {step} about walrus{chat}"),
                              msg("assistant", f"answer {step}")),
                      compaction=compaction, usage=usage)


async def _fill(store: SessionStore) -> list[list[str]]:
    """100 chains of depth 0-3, each with usage, a searchable word and a delivered reply."""
    chains = []
    for chat in range(CHAINS):
        session = await store.open_session(f"test:{chat}", model="fake-model",
                                           system_prompt="be brief",
                                           system_message=msg("system", "be brief"))
        ids = [session.id]
        for step in range(chat % 4):
            ids.append((await store.record_turn(ids[-1], _turn(chat, step, True))).id)
        row = await store.ingest(platform="test", chat_id=str(chat), message_id="m1",
                                 chat_key=f"test:{chat}", text="last", sender_id="u",
                                 sender_name="Ada")
        assert row is not None
        await store.take_inbound([row.id], ids[-1], [msg("user", "last")])
        await store.record_turn(ids[-1], TurnRecord(
            before=(msg("assistant", "reply"),), replied=(row.id,),
            delivery=(OutChunk("reply"),), usage=_turn(chat, 9, False).usage))
        await store.mark_delivered(row.id, 0, "p1")
        chains.append(ids)
    return chains


async def _answers(store: SessionStore, chains: list[list[str]]) -> list[object]:
    out: list[object] = []
    for ids in chains:
        out.append([await store.get_compression_tip(i) for i in ids])
        out.append(await store.usage_by_model(ids[0]))
        out.append([(s.id, s.end_reason, s.message_count) for s in await store.chain(ids[0])])
    for word in ("walrus17", "otter42", "question"):
        out.append(sorted((h.session_id, h.seq) for h in await store.search(word, limit=500)))
    out.append(await store.open_inbound())
    keys = [key for chat in range(CHAINS) for key in _spend_keys(chat)]
    out.append(await store.spent(keys, now=0.0))  # budgets' counters
    return out


async def _usage_replies(tmp_path: Path, base_url: str, storage: dict[str, str]) -> list[str]:
    platform = RecordingPlatform()
    gateway = await started_gateway(config_for(tmp_path, base_url, storage=storage), [platform])
    try:
        for n, chat in enumerate((3, 42, 99), start=1):
            await platform.say("/usage", chat_id=str(chat), message_id=f"u{chat}")
            await platform.wait_delivered(n)
    finally:
        await close(gateway)
    return platform.texts()


async def test_migrate_round_trips_chains_search_and_usage(tmp_path, postgres_url, fake_openai
                                                           ) -> None:
    source = tmp_path / "old.db"
    async with SqliteSessionStore(source) as sqlite:
        chains = await _fill(sqlite)
        expected = await _answers(sqlite, chains)
    picture = b"\xff\xd8\xff" + bytes(range(256)) * 8
    ref = AttachmentFiles(tmp_path / "attachments").save("telegram:7", picture, "jpg")

    config = str(write_config(tmp_path, storage={"path": str(source)}))
    ran = await threadline("migrate", "--to", postgres_url, "--config", config, home=tmp_path)
    assert ran.code == 0, ran.err
    assert f"{CHAINS} chats" in ran.out and "row counts equal" in ran.out, ran.out
    assert f"{CHAINS + 1} spend_counters" in ran.out, ran.out

    async with PostgresSessionStore(postgres_url) as pg:
        assert await _answers(pg, chains) == expected
        # New rows continue after the copied ids instead of colliding with them.
        row = await pg.ingest(platform="test", chat_id="new", message_id="1",
                              chat_key="test:new", text="hi", sender_id=None, sender_name=None)
        assert row is not None and row.id > CHAINS
        await pg.finish_inbound([row.id], "failed")
        # The files beside the SQLite file are on the shelf every process reads.
        assert await pg.shelf("attachments", 3600).get(ref) == picture

    # The shell and /usage read the same answers from either database.
    for sub in ("pg", "a", "b"):
        (tmp_path / sub).mkdir()
    pg_config = str(write_config(tmp_path / "pg", storage={"url": postgres_url}))
    for cfg in (config, pg_config):
        args = ("--config", cfg)
        tip = await threadline("sessions", "tip", chains[7][0], *args, home=tmp_path)
        assert tip.out.strip() == chains[7][-1], tip.err
        found = await threadline("sessions", "search", "otter42", *args, home=tmp_path)
        assert chains[42][1] in found.out, found.err
    assert await _usage_replies(tmp_path / "a", fake_openai.base_url, {"path": str(source)}) \
        == await _usage_replies(tmp_path / "b", fake_openai.base_url, {"url": postgres_url})


async def test_migrate_refuses_a_database_that_already_holds_sessions(tmp_path, postgres_url
                                                                      ) -> None:
    source = tmp_path / "old.db"
    async with SqliteSessionStore(source) as sqlite:
        await _fill_one(sqlite)
    async with PostgresSessionStore(postgres_url) as pg:
        await _fill_one(pg)
    ran = await threadline("migrate", "--from", f"sqlite:{source}", "--to", postgres_url,
                           "--config", str(write_config(tmp_path)), home=tmp_path)
    assert ran.code == 1 and "already holds sessions" in ran.err, ran.err
    assert "Traceback" not in ran.err


async def _fill_one(store: SessionStore) -> None:
    await store.open_session("test:1", model="m", system_prompt=None)


async def test_migrate_refuses_a_file_a_running_gateway_writes(tmp_path, postgres_url,
                                                               fake_openai, fake_telegram):
    """A copy taken while the gateway writes would miss what it writes next: refused in
    one line while it runs; once it stopped, the same command copies everything."""
    config = service_config(tmp_path, fake_telegram, fake_openai)
    proc = await asyncio.create_subprocess_exec(
        THREADLINE, "run", "--config", config, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        cwd=str(tmp_path), env=cli_env(tmp_path))
    try:
        fake_telegram.push(fake_telegram.updates.private_text("hello", 5550777))
        await fake_telegram.wait_for_messages(5550777, 1, timeout=60)  # it runs, and wrote
        ran = await threadline("migrate", "--to", postgres_url, "--config", config,
                               home=tmp_path)
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 60)
    assert ran.code == 1, (ran.out, ran.err)
    assert f"in use by a running gateway (pid {proc.pid})" in ran.err, ran.err
    assert "Traceback" not in ran.err and len(ran.err.strip().splitlines()) == 1, ran.err
    again = await threadline("migrate", "--to", postgres_url, "--config", config,
                             home=tmp_path)
    assert again.code == 0 and "row counts equal" in again.out, again.err
