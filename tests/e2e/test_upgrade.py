"""Schema upgrades (issue 37, point 2): only the service upgrades, and only after keeping
the file as it was beside it; every other command leaves an older database unchanged, to
the byte, and says it needs an upgrade. `threadline restore` of the kept copy goes back."""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
from contextlib import closing
from pathlib import Path

from storage.sqlite import SqliteSessionStore, schema
from tests.harness.cli import cli_env, threadline
from tests.harness.gateway import telegram_run_config, write_config
from tests.harness.running import Running, answered
from tests.harness.small_disk import small_disk

OLD = 9  # the schema of a database an earlier release wrote


def older_database(db: Path) -> None:
    """A database at schema OLD with a chat in it, as the release of that schema left it."""
    with closing(sqlite3.connect(db, isolation_level=None)) as con:
        schema.configure(con, 1000)
        assert schema.migrate(con, str(db), target=OLD) == OLD
        con.execute("INSERT INTO sessions (id, chat_key, kind, started_at)"
                    " VALUES ('old', 'telegram:5550037', 'root', 1)")
        con.execute("INSERT INTO messages (session_id, seq, role, content, created_at)"
                    " VALUES ('old', 0, 'user', 'the heron nests early', 1)")
        con.execute("INSERT INTO chats VALUES ('telegram:5550037', 'old', 1)")


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def version_and_rows(db: Path) -> tuple[int, list[tuple[object, ...]], list[str]]:
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as con:
        return (schema.user_version(con),
                con.execute("SELECT id, session_id, content FROM messages").fetchall(),
                [r[0] for r in con.execute("PRAGMA integrity_check")])


async def test_read_only_commands_leave_an_older_database_as_it_is(tmp_path, fake_openai,
                                                                   fake_telegram):
    config = telegram_run_config(tmp_path, fake_telegram, fake_openai.base_url)
    db = tmp_path / "threadline.db"
    older_database(db)
    before, files = digest(db), sorted(p.name for p in tmp_path.iterdir())
    for args in (["sessions", "list"], ["sessions", "show", "old"], ["sessions", "tip", "old"],
                 ["sessions", "search", "heron"], ["compress", "telegram:5550037"]):
        ran = await threadline(*args, "--config", config, home=tmp_path)
        assert ran.code == 1, (args, ran.out, ran.err)
        assert "this database needs an upgrade; run the service once" in ran.err, ran.err
        assert "Traceback" not in ran.err and len(ran.err.strip().splitlines()) == 1, ran.err
        assert digest(db) == before, args
    copied = await threadline("backup", str(tmp_path / "copy.db"), "--config", config,
                              home=tmp_path)
    assert copied.code == 0, copied.err
    assert version_and_rows(tmp_path / "copy.db")[0] == OLD  # copied as it is
    assert digest(db) == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "copy.db") == \
        [*files, "threadline.db.last-backup"]  # no -wal, -shm nor anything else beside it


async def test_run_keeps_the_old_file_before_upgrading_and_restore_goes_back(
        tmp_path, fake_openai, fake_telegram):
    config = telegram_run_config(tmp_path, fake_telegram, fake_openai.base_url)
    db = tmp_path / "threadline.db"
    older_database(db)
    original = version_and_rows(db)
    (tmp_path / "threadline.db.before-v3").write_bytes(b"a copy from an earlier upgrade")
    service = await Running.start(tmp_path, "run", "--config", config)
    try:
        assert await answered(fake_telegram, "after the upgrade") == "echo: after the upgrade"
        await service.wait_for_line(f"before-v{schema.SCHEMA_VERSION}")
    finally:
        assert await service.stop() == 0
    kept = tmp_path / f"threadline.db.before-v{schema.SCHEMA_VERSION}"
    # The release of schema OLD opens what it finds at its own version, whole, every row.
    assert version_and_rows(kept) == original
    assert oct(kept.stat().st_mode & 0o777) == "0o600"
    assert not (tmp_path / "threadline.db.before-v3").exists()  # kept until the next upgrade
    assert version_and_rows(db)[0] == schema.SCHEMA_VERSION
    listed = await threadline("sessions", "list", "--config", config, home=tmp_path)
    assert listed.code == 0 and "old" in listed.out, listed.err
    back = await threadline("restore", str(kept), "--config", config, home=tmp_path)
    assert back.code == 0, back.err
    assert version_and_rows(db) == original  # ready for the previous release again


async def test_a_current_database_is_not_copied_on_start(tmp_path, fake_openai, fake_telegram):
    config = telegram_run_config(tmp_path, fake_telegram, fake_openai.base_url)
    for n in (1, 2):  # the first start creates it, the second finds it current
        service = await Running.start(tmp_path, "run", "--config", config)
        try:
            await answered(fake_telegram, f"start {n}", n)
        finally:
            assert await service.stop() == 0
    assert not list(tmp_path.glob("threadline.db.before-v*"))


async def test_sessions_on_a_mistyped_home_creates_nothing(tmp_path, fake_openai,
                                                           fake_telegram):
    config = telegram_run_config(tmp_path, fake_telegram, fake_openai.base_url)
    home = tmp_path / "no-such-home"
    ran = await threadline("sessions", "list", "--config", config, home=tmp_path,
                           env=cli_env(home))
    assert ran.code == 1 and "there is no database at" in ran.err, ran.err
    assert not home.exists()


async def test_sessions_reads_a_database_on_read_only_media(tmp_path):
    with small_disk(tmp_path / "media", 8) as media:
        db = media.path / "threadline.db"
        config = str(write_config(tmp_path, storage={"path": str(db)}))
        async with SqliteSessionStore(db) as store:
            await store.open_session("telegram:5550037", model="m", system_prompt=None)
        remounted = subprocess.run(["mount", "-o", "remount,ro", str(media.path)],  # noqa: ASYNC221
                                   capture_output=True, text=True)
        assert remounted.returncode == 0, remounted.stderr
        ran = await threadline("sessions", "list", "--config", config, home=tmp_path)
        assert ran.code == 0 and "telegram:5550037" in ran.out, ran.err
