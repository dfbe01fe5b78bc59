"""Is the database file whole? The check after an unclean exit, and online backups.

A damaged file is never repaired or overwritten here: the service refuses to start with
one line naming the file and the last backup, and the operator decides (see
docs/operations.md, "The database").
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from storage import owner_only


def quick_check(db: sqlite3.Connection) -> str | None:
    """SQLite's own consistency check (PRAGMA quick_check): None when all is well."""
    try:
        rows = db.execute("PRAGMA quick_check").fetchall()
    except sqlite3.DatabaseError as exc:
        return str(exc)
    found = [str(row[0]) for row in rows]
    return None if found == ["ok"] else "; ".join(found[:3])


def backup_record(path: str) -> Path:
    """Where `threadline backup` notes the path of its last copy: beside the database."""
    return Path(f"{path}.last-backup")


def last_backup(path: str) -> str | None:
    try:
        noted = backup_record(path).read_text().strip()
    except OSError:
        return None
    return noted if noted and Path(noted).exists() else None


def damaged(path: str, problem: str) -> str:
    """The one line the service says about a damaged database, naming the command that
    puts the last backup back (docs/operations.md, "Restoring a backup")."""
    backup = last_backup(path)
    where = (f"`threadline restore {backup}` puts the last backup in its place"
             if backup else "no backup was recorded; `threadline restore BACKUP` puts one "
             "in its place")
    return (f"database {path} is damaged ({problem}); it was left untouched: {where}, "
            "keeping the damaged file aside; then start again.")


# The files SQLite keeps beside a database while it is open, and the running gateway's lock.
_COMPANIONS = ("", "-wal", "-shm", "-journal", ".lock")


def unsafe_target(db_path: str, dest: str) -> str | None:
    """Why `dest` must not receive a backup of `db_path`, or None. A copy written over the
    live database, or over its -wal, -shm or journal, replaces it under whoever has it
    open (or its lock, under the gateway holding it): the same path however it is
    written, a symbolic link to it, or a hard link."""
    target = Path(dest)
    if target.is_dir():
        return f"{dest} is a directory; give the backup a file name"
    resolved = target.resolve()
    for suffix in _COMPANIONS:
        live = Path(f"{db_path}{suffix}")
        if resolved == live.resolve() or (target.exists() and live.exists()
                                          and os.path.samefile(target, live)):
            what = "the live database" if not suffix else f"the live database's {suffix[1:]}"
            return (f"{dest} is {what}; a backup there would replace it under the running "
                    "gateway: give another path")
    return None


RUN_KEY = "run:active"  # the pid of the running service; empty after a clean stop


def copy_to(source: sqlite3.Connection, dest: str, db_path: str, *, record: bool = True) -> None:
    """A consistent copy of the open database at `dest`, in one step (a snapshot even
    while others write), checked, then moved into place; `dest` is never left half written,
    and nothing is left behind when the copy fails. The copy does not say a gateway is
    running on it (a restore starts without a false crash warning). `record`: note it as
    the last backup, named by the damaged-database message."""
    target = Path(dest)
    partial = target.with_name(f".{target.name}.partial")
    partial.unlink(missing_ok=True)
    try:
        owner_only.create_file(partial)  # a copy of the chats is as private as the database
        copy = sqlite3.connect(partial, isolation_level=None)
        try:
            source.backup(copy)  # all pages in one step: one read transaction, one snapshot
            copy.execute("PRAGMA journal_mode = DELETE")  # one self-contained file
            clear_run_marker(copy)
            problem = quick_check(copy)
        finally:
            copy.close()
        if problem:
            raise sqlite3.DatabaseError(f"the copy failed its check: {problem}")
        os.replace(partial, target)
    except BaseException:
        for leftover in ("", "-journal", "-wal", "-shm"):  # the copy's own journal too
            Path(f"{partial}{leftover}").unlink(missing_ok=True)
        raise
    os.chmod(target, owner_only.FILE_MODE)
    if record:
        owner_only.write_file(backup_record(db_path), f"{target.resolve()}\n".encode())


def still_running(pid: str) -> bool:
    """Whether the gateway named by the running marker is alive (a Threadline process)."""
    try:
        cmdline = Path(f"/proc/{int(pid)}/cmdline").read_bytes()
    except (ValueError, OSError):
        return False
    return int(pid) != os.getpid() and b"threadline" in cmdline


def clear_run_marker(db: sqlite3.Connection) -> None:
    """Say no gateway is running on this file (a copy, or a file put back by restore)."""
    if db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'settings'"
                  ).fetchone():
        db.execute("UPDATE settings SET value = '' WHERE key = ?", (RUN_KEY,))
