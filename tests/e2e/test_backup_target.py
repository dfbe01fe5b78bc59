"""`threadline backup` never writes over the database it copies (issue 37, point 1): the
live path however it is written, a symbolic or hard link to it, its -wal or -shm, or a
directory are refused in one line, and every file is left as it was."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from storage.sqlite import SqliteSessionStore
from tests.harness.cli import threadline
from tests.harness.gateway import write_config
from tests.harness.small_disk import small_disk
from tests.harness.store import msg


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else "-"


def partials(root: Path) -> list[Path]:
    return list(root.rglob(".*.partial"))


async def test_a_backup_onto_the_live_database_is_refused_and_changes_nothing(
        tmp_path: Path) -> None:
    data = tmp_path / "data"
    db = data / "threadline.db"
    async with SqliteSessionStore(db) as store:
        await store.open_session("console:local", model="m", system_prompt=None)
        # Open, so SQLite keeps its -wal and -shm beside it, as under a running gateway.
        config = str(write_config(tmp_path, storage={"path": str(db)}))
        (tmp_path / "link.db").symlink_to(db)
        os.link(db, tmp_path / "hard.db")
        files = [db, Path(f"{db}-wal"), Path(f"{db}-shm")]
        before = [digest(f) for f in files]
        targets = [str(db), f"{data}/../data/./threadline.db", "data/threadline.db",
                   str(tmp_path / "link.db"), str(tmp_path / "hard.db"), f"{db}-wal",
                   f"{db}-shm", f"{db}.lock", str(data)]
        for target in targets:
            ran = await threadline("backup", target, "--config", config, home=tmp_path)
            assert ran.code == 1, (target, ran.out, ran.err)
            assert "backup refused" in ran.err and "Traceback" not in ran.err, ran.err
            assert len(ran.err.strip().splitlines()) == 1, ran.err
            assert [digest(f) for f in files] == before, target
        assert not partials(tmp_path)
        fine = await threadline("backup", str(tmp_path / "copy.db"), "--config", config,
                                home=tmp_path)
        assert fine.code == 0, fine.err


async def test_a_backup_that_fails_for_space_leaves_nothing_behind(tmp_path: Path) -> None:
    db = tmp_path / "threadline.db"
    async with SqliteSessionStore(db) as store:
        session = await store.open_session("console:local", model="m", system_prompt=None)
        await store.append_messages(session.id, [
            msg("user", f"{n} " + "words to keep " * 2000) for n in range(80)])
    config = str(write_config(tmp_path, storage={"path": str(db)}))
    with small_disk(tmp_path / "disk", 1) as disk:  # the database does not fit on it
        ran = await threadline("backup", str(disk.path / "copy.db"), "--config", config,
                               home=tmp_path)
        assert ran.code == 1 and "Traceback" not in ran.err, ran.err
        assert "full" in ran.err.lower() or "space" in ran.err.lower(), ran.err
        assert list(disk.path.iterdir()) == []  # no copy, no .partial
