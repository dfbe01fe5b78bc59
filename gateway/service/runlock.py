"""One `threadline run` per SQLite file: a lock file beside the database, held with
`flock` for as long as the gateway runs.

The kernel drops an flock when the process that holds it ends, however it ends, so a
crash or a SIGKILL never leaves a stale lock behind; the pid written into the file only
says who holds it. With PostgreSQL storage there is no lock: several processes share one
database by design (docs/scale-out.md).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from gateway.config import Config


class AlreadyRunning(Exception):
    """Another gateway holds the database's lock; str() is one line naming its pid."""

    def __init__(self, db_path: Path, pid: int | None) -> None:
        self.pid = pid
        who = f"pid {pid}" if pid is not None else "still starting, pid not yet written"
        super().__init__(
            f"another gateway ({who}) is already running on {db_path}; stop it first, or "
            "give this one a database of its own (storage.path)")


def lock_path(db_path: Path) -> Path:
    return db_path.with_name(db_path.name + ".lock")


@contextlib.contextmanager
def held(db_path: Path) -> Iterator[None]:
    """Hold the lock beside `db_path` for the block; AlreadyRunning when another has it."""
    # Opened without truncating: the holder's pid stays readable until the lock is ours.
    fd = os.open(lock_path(db_path), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise AlreadyRunning(db_path, _read_pid(fd)) from None
        os.fchmod(fd, 0o600)  # a file left by an older umask is owner-only again
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
        os.ftruncate(fd, 0)  # a clean stop leaves no pid that could mislead a reader
    finally:
        os.close(fd)  # closing the last descriptor is what releases the lock


def run_lock(config: Config) -> contextlib.AbstractContextManager[None]:
    """The lock `threadline run` holds: on the SQLite file, none with PostgreSQL."""
    if config.storage.url:
        return contextlib.nullcontext()
    return held(config.db_path)


def _read_pid(fd: int) -> int | None:
    text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    return int(text) if text.isdigit() else None
