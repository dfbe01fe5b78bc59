"""The "running" note in the database (issue 37, point 9): a `chat` beside the service
neither warns of a crash that did not happen nor erases the service's note, so a later
crash of the service is still noticed; a backup does not carry the note."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

from storage.sqlite import SqliteSessionStore
from tests.harness.cli import threadline
from tests.harness.gateway import telegram_run_config
from tests.harness.running import Running, answered

UNCLEAN = "did not end cleanly"


def marker(db: Path) -> str:
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as con:
        row = con.execute("SELECT value FROM settings WHERE key = 'run:active'").fetchone()
        return row[0] if row else ""


async def test_a_chat_beside_the_service_leaves_its_note_alone(tmp_path, fake_openai,
                                                               fake_telegram):
    config = telegram_run_config(tmp_path, fake_telegram, fake_openai.base_url)
    db = tmp_path / "threadline.db"
    service = await Running.start(tmp_path, "run", "--config", config)
    try:
        await answered(fake_telegram, "hello", 1)
        chat = await threadline("chat", "--config", config, stdin="beside\n", home=tmp_path)
        assert chat.code == 0 and UNCLEAN not in chat.err, chat.err
        assert marker(db) == str(service.pid)  # the chat's clean stop did not erase it
        backup = tmp_path / "copy.db"
        made = await threadline("backup", str(backup), "--config", config, home=tmp_path)
        assert made.code == 0, made.err
        assert marker(backup) == ""
    finally:
        await service.kill()
    again = await Running.start(tmp_path, "run", "--config", config)
    try:
        await again.wait_for_line(UNCLEAN)  # the crash is still seen, and the file checked
        await answered(fake_telegram, "after the crash", 2)
    finally:
        assert await again.stop() == 0
    assert marker(db) == ""


async def test_a_backup_made_by_the_store_does_not_say_it_is_running(tmp_path) -> None:
    db, copy = tmp_path / "threadline.db", tmp_path / "copy.db"
    async with SqliteSessionStore(db) as store:
        await store.begin_run()
        await store.backup(copy)
        assert marker(db) != ""
    assert marker(copy) == ""
