"""Files every process reads (issue 34, "Shared files"): a saved tool output or a picture
kept by one process is read by another whose directory never held it, through PostgreSQL."""

from __future__ import annotations

import time
from pathlib import Path

import asyncpg

from agent.attachments.files import AttachmentFiles
from agent.tools.budget import OutputBudget, chat_directory
from storage.postgres import PostgresSessionStore
from storage.sqlite import SqliteSessionStore

CHAT = "telegram:42"


async def test_a_saved_tool_output_is_read_by_a_process_that_never_saved_it(
        postgres_url: str, tmp_path: Path) -> None:
    big = "".join(f"line {i}\n" for i in range(20_000))
    async with PostgresSessionStore(postgres_url) as one, \
            PostgresSessionStore(postgres_url) as two:
        first = OutputBudget(chat_directory(tmp_path / "p1", CHAT), 8_000,
                             one.shelf("tool_outputs", 3600))
        [saved] = first.apply([(None, {"role": "tool", "content": big})])
        await first.share()
        file_id = saved["content"].split("File ")[1].split(";")[0]
        second = OutputBudget(chat_directory(tmp_path / "p2", CHAT), 8_000,
                              two.shelf("tool_outputs", 3600))
        read = await second.reader().run({"file": file_id, "offset": 7, "limit": 20})
        assert read == big[7:27]
        assert (second.directory / file_id).is_file()  # kept in its directory from now on
        # Another chat's id is not this chat's: the key holds the chat's directory.
        other = OutputBudget(chat_directory(tmp_path / "p3", "telegram:43"), 8_000,
                             two.shelf("tool_outputs", 3600))
        assert "no saved output" in await other.reader().run({"file": file_id})


async def test_a_picture_is_fetched_once_and_old_files_leave_the_shelf(
        postgres_url: str, tmp_path: Path) -> None:
    photo = b"\xff\xd8\xff" + bytes(range(256)) * 40
    async with PostgresSessionStore(postgres_url) as one, \
            PostgresSessionStore(postgres_url) as two:
        kept = AttachmentFiles(tmp_path / "p1", one.shelf("attachments", 3600))
        ref = await kept.keep(CHAT, photo, "jpg")
        other = AttachmentFiles(tmp_path / "p2", two.shelf("attachments", 3600))
        assert other.read(ref) is None
        message = {"role": "user", "content": [{"type": "attachment", "kind": "image",
                                                "file": ref, "mime": "image/jpeg"}]}
        await other.fetch_missing([message])
        assert other.read(ref) == photo
        # Past its retention the shelf forgets it, when the next process starts using it.
        con = await asyncpg.connect(postgres_url)
        try:
            await con.execute("UPDATE files SET used_at = $1", time.time() - 7200)
        finally:
            await con.close()
        late = AttachmentFiles(tmp_path / "p3", two.shelf("attachments", 3600))
        await late.fetch_missing([message])
        assert late.read(ref) is None


async def test_one_process_on_sqlite_has_no_shelf(tmp_path: Path) -> None:
    async with SqliteSessionStore(tmp_path / "threadline.db") as store:
        assert store.shelf("attachments", 3600) is None  # the directory beside the file
