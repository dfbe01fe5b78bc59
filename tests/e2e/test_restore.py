"""`threadline restore BACKUP` (issue 37, point 1): after a crash that left a -wal behind,
the restored database is whole and holds exactly the backup's rows, the replaced files are
kept aside together, the service starts without a false crash warning and the chat goes
on; and the restore refuses, changing nothing, while the database is in use or when the
backup is not sound."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, closing
from pathlib import Path
from typing import Any

from gateway.service.runlock import held
from storage.sqlite import SqliteSessionStore, schema
from tests.harness.cli import threadline
from tests.harness.gateway import telegram_run_config
from tests.harness.running import USER, Running, answered

TABLES = ("sessions", "messages", "inbound", "chats", "usage", "deliveries")


def rows(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row that matters, table by table (the running marker aside)."""
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as con:
        found = {t: con.execute(f"SELECT * FROM {t} ORDER BY rowid").fetchall() for t in TABLES}
        found["settings"] = con.execute("SELECT key, value FROM settings WHERE key <> "
                                        "'run:active' ORDER BY key").fetchall()
        return found


def integrity(db: Path) -> list[str]:
    with closing(sqlite3.connect(db)) as con:
        return [r[0] for r in con.execute("PRAGMA integrity_check").fetchall()]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else "-"


async def test_restore_after_a_crash_with_a_leftover_wal_puts_back_exactly_the_backup(
        tmp_path, fake_openai, fake_telegram):
    config = telegram_run_config(tmp_path, fake_telegram, fake_openai.base_url)
    db, backup = tmp_path / "threadline.db", tmp_path / "saved.db"
    first = await Running.start(tmp_path, "run", "--config", config)
    try:
        await answered(fake_telegram, "the heron nests early", 1)
        made = await threadline("backup", str(backup), "--config", config, home=tmp_path)
        assert made.code == 0, made.err
        for n in range(2, 5):  # written after the backup: only the -wal holds these
            await answered(fake_telegram, f"later message {n}", n)
    finally:
        await first.kill()  # a crash: the -wal is left with what it held
    assert (tmp_path / "threadline.db-wal").stat().st_size > 0  # noqa: ASYNC240
    ran = await threadline("restore", str(backup), "--config", config, home=tmp_path)
    assert ran.code == 0, ran.err
    assert "Traceback" not in ran.err
    assert integrity(db) == ["ok"]
    assert rows(db) == rows(backup)
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("threadline.db.replaced-")]
    kept = min(aside, key=lambda p: len(p.name))
    assert {p.name for p in aside} == {kept.name, f"{kept.name}-wal", f"{kept.name}-shm"}
    # The replaced database, opened with its own -wal, still has everything it had.
    assert len(rows(kept)["messages"]) > len(rows(db)["messages"])
    assert not (tmp_path / "threadline.db-wal").exists() and not list(tmp_path.glob(".*.restoring"))
    assert oct(db.stat().st_mode & 0o777) == "0o600"
    again = await Running.start(tmp_path, "run", "--config", config)
    try:
        # The reply counts every message the chat was sent: the four before, this one.
        assert await answered(fake_telegram, "after the restore", 5) == \
            "echo: after the restore"
        assert not again.said("did not end cleanly"), again.log
        history = fake_openai.calls_to("/chat/completions")[-1].json["messages"]
        said = " ".join(str(m.get("content")) for m in history)
        assert "the heron nests early" in said and "later message" not in said
    finally:
        assert await again.stop() == 0


@asynccontextmanager
async def backed_up(tmp_path: Path, fake_openai: Any, fake_telegram: Any
                    ) -> AsyncIterator[tuple[str, Path, Path, SqliteSessionStore]]:
    """A database with a chat, open, and its backup: (config, db, backup, store)."""
    config = telegram_run_config(tmp_path, fake_telegram, fake_openai.base_url)
    db, backup = tmp_path / "threadline.db", tmp_path / "saved.db"
    async with SqliteSessionStore(db) as store:
        await store.open_session("telegram:1", model="m", system_prompt=None)
        await store.backup(backup)
        yield config, db, backup, store


async def test_restore_refuses_while_the_database_is_in_use_and_changes_nothing(
        tmp_path, fake_openai, fake_telegram):
    async with backed_up(tmp_path, fake_openai, fake_telegram) as (config, db, backup, _):
        # Open in another process's stead: a reader holds the -shm (a `chat`, `web`).
        ran = await threadline("restore", str(backup), "--config", config, home=tmp_path)
        assert ran.code == 1 and "open in another process" in ran.err, ran.err
    before = digest(db)  # closed: the -wal is in the file now
    with held(db):  # what `threadline run` holds
        ran = await threadline("restore", str(backup), "--config", config, home=tmp_path)
    assert ran.code == 1 and "is running" in ran.err, ran.err
    assert len(ran.err.strip().splitlines()) == 1 and "Traceback" not in ran.err
    assert digest(db) == before
    assert not [p for p in tmp_path.iterdir() if ".replaced-" in p.name]


async def test_a_backup_that_is_not_sound_is_refused_and_nothing_changes(
        tmp_path, fake_openai, fake_telegram):
    async with backed_up(tmp_path, fake_openai, fake_telegram) as (config, db, saved, _):
        pass
    before = digest(db)
    good = saved.read_bytes()
    (tmp_path / "junk.db").write_bytes(b"not a database at all" * 500)
    (tmp_path / "cut.db").write_bytes(good[:len(good) // 2])
    (tmp_path / "newer.db").write_bytes(good)
    with closing(sqlite3.connect(tmp_path / "newer.db")) as con:
        con.execute(f"PRAGMA user_version = {schema.SCHEMA_VERSION + 1}")
    with closing(sqlite3.connect(tmp_path / "other.db")) as con:
        con.execute("CREATE TABLE notes (x)")
        con.execute("PRAGMA user_version = 3")
    for name, why in [("junk.db", "not a whole SQLite database"), ("cut.db", ""),
                      ("newer.db", "newer than this release"),
                      ("other.db", "not a Threadline database"), ("missing.db", "no backup")]:
        ran = await threadline("restore", str(tmp_path / name), "--config", config,
                               home=tmp_path)
        assert ran.code == 1 and why in ran.err, (name, ran.err)
        assert len(ran.err.strip().splitlines()) == 1 and "Traceback" not in ran.err, ran.err
        assert digest(db) == before, name
    assert not [p for p in tmp_path.iterdir() if ".replaced-" in p.name or ".restoring" in p.name]


async def test_the_damaged_database_message_names_the_restore_command(
        tmp_path, fake_openai, fake_telegram):
    async with backed_up(tmp_path, fake_openai, fake_telegram) as (config, db, backup, store):
        await store.begin_run()  # ... and never ends it: a crash
    raw = bytearray(db.read_bytes())
    raw[4096 * 3:4096 * 4] = b"\xff" * 4096  # a page in the middle: only the check sees it
    db.write_bytes(bytes(raw))
    down = await Running.start(tmp_path, "run", "--config", config)
    assert await down.exited(60) != 0
    assert down.said(f"`threadline restore {backup.resolve()}`"), down.log
    ran = await threadline("restore", str(backup), "--config", config, home=tmp_path)
    assert ran.code == 0, ran.err
    up = await Running.start(tmp_path, "run", "--config", config)
    try:
        assert await answered(fake_telegram, "back again", 1, USER) == "echo: back again"
    finally:
        assert await up.stop() == 0
