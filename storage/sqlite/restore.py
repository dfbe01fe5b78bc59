"""`threadline restore BACKUP`: put a backup in place of the database, whole.

A database is more than its file: after a crash its `-wal` holds committed pages that
SQLite replays onto whatever file bears the name next time, so copying a backup over the
file alone replays the old log onto it (a malformed result) or hides the backup behind
newer pages. Here the file and its companions move aside together, under a name with
the time, and the backup, checked first, takes their place (docs/operations.md,
"Restoring a backup").
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from storage import owner_only
from storage.errors import StoreError
from storage.sqlite import integrity, opening, schema

# A connection to a WAL database holds a shared lock on this byte of its -shm file for as
# long as it is open (SQLite's unix VFS: the "DMS" slot after the 8 lock bytes at 120).
_SHM_DMS_BYTE = 128
_COMPANIONS = ("-wal", "-shm", "-journal")


@dataclass(frozen=True)
class Restored:
    database: str
    backup: str
    aside: str | None  # where the replaced database went (its companions beside it)
    version: int  # the restored file's schema version


def restore(db_path: str, backup: str, *, now: datetime | None = None) -> Restored:
    """Check `backup`, move the database and its -wal/-shm aside, put the backup in place.
    StoreError (one line) when the database is in use or the backup is not sound."""
    source = Path(backup)
    if not source.is_file():
        raise StoreError(f"there is no backup file at {backup}")
    if Path(db_path).exists() and os.path.samefile(source, db_path):
        raise StoreError(f"{backup} is the database itself; give a backup's path")
    owner_only.make_dirs(Path(db_path).parent)
    with _nobody_running(db_path):
        staged = Path(db_path).with_name(f".{Path(db_path).name}.restoring")
        try:
            version = _stage(source, staged)
            os.chmod(staged, owner_only.FILE_MODE)
            aside = _move_aside(db_path, now or datetime.now())
            os.replace(staged, db_path)
        finally:
            staged.unlink(missing_ok=True)
        _sync_directory(Path(db_path).parent)
    return Restored(db_path, str(source.resolve()), aside, version)


@contextlib.contextmanager
def _nobody_running(db_path: str) -> Iterator[None]:
    """Hold the gateway's lock for the restore (a `run` started meanwhile exits 78), and
    refuse while any process has the database open."""
    lock = os.open(f"{db_path}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = os.pread(lock, 32, 0).decode("ascii", "replace").strip() or "unknown"
            raise StoreError(f"a gateway (pid {pid}) is running on {db_path}; stop it first "
                             "(systemctl stop threadline), then restore") from None
        if _open_elsewhere(db_path):
            raise StoreError(f"{db_path} is open in another process (`threadline chat`, "
                             "`web` or `sessions`?); close it first, then restore")
        yield
    finally:
        os.close(lock)


def _open_elsewhere(db_path: str) -> bool:
    """Whether another process has the WAL database open (it holds its -shm's DMS byte)."""
    try:
        fd = os.open(f"{db_path}-shm", os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return False  # no connection is open without its -shm
    try:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, _SHM_DMS_BYTE)
        except OSError:
            return True
        fcntl.lockf(fd, fcntl.LOCK_UN, 1, _SHM_DMS_BYTE)
        return False
    finally:
        os.close(fd)


def _stage(source: Path, staged: Path) -> int:
    """Copy the backup to `staged` and check the copy: whole, a Threadline database of a
    schema this release opens, marked as not running. Returns its schema version."""
    staged.unlink(missing_ok=True)
    owner_only.create_file(staged)
    try:
        backup = opening.plain(str(source), "copy", 5.0)
        copy = sqlite3.connect(staged, isolation_level=None)
        try:
            backup.backup(copy)
            problem = _unsound(copy, str(source))
            if problem is None:
                copy.execute("PRAGMA journal_mode = DELETE")
                integrity.clear_run_marker(copy)
            return _or_raise(problem, schema.user_version(copy))
        finally:
            copy.close()
            backup.close()
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{source} cannot be restored: it is not a whole SQLite database "
                         f"({exc}); nothing was changed") from None


def _unsound(copy: sqlite3.Connection, label: str) -> str | None:
    found = [str(row[0]) for row in copy.execute("PRAGMA integrity_check").fetchall()]
    if found != ["ok"]:
        return f"{label} failed its integrity check ({'; '.join(found[:3])})"
    version = schema.user_version(copy)
    if version == 0 or not copy.execute(
            "SELECT 1 FROM sqlite_master WHERE name = 'sessions'").fetchone():
        return f"{label} is not a Threadline database"
    if version > schema.SCHEMA_VERSION:
        return (f"{label} has schema version {version}, newer than this release "
                f"({schema.SCHEMA_VERSION}); restore it with the release that made it")
    return None


def _or_raise(problem: str | None, version: int) -> int:
    if problem is not None:
        raise StoreError(f"{problem}; nothing was changed")
    return version


def _move_aside(db_path: str, now: datetime) -> str | None:
    """Move the database and its companions to `NAME.replaced-TIME` (kept, never
    deleted); None when there was no database."""
    if not Path(db_path).exists():
        for suffix in _COMPANIONS:  # a log without its database: it must not meet the copy
            Path(f"{db_path}{suffix}").unlink(missing_ok=True)
        return None
    stamp = now.strftime("%Y%m%dT%H%M%S")
    aside, n = f"{db_path}.replaced-{stamp}", 1
    while any(Path(f"{aside}{s}").exists() for s in ("", *_COMPANIONS)):
        n += 1
        aside = f"{db_path}.replaced-{stamp}-{n}"
    # Companions first: the name that SQLite would replay a log onto goes last.
    for suffix in _COMPANIONS:
        if Path(f"{db_path}{suffix}").exists():
            os.replace(f"{db_path}{suffix}", f"{aside}{suffix}")
    os.replace(db_path, aside)
    return aside


def _sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
