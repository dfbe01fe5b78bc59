"""A full disk under the SQLite store, told apart from the failures that do not pass.

SQLite rolls a write that found no room back whole, so nothing was done and the same call
works once space is freed: that is StoreUnavailable, which the gateway waits out with the
messages kept open (gateway/turns/outages.py), not a plain StoreError, which it answers with an
apology. SQLite says SQLITE_FULL when the disk refused a write (ENOSPC, or a short write).
A quota (EDQUOT) or growing the -shm file comes back as an I/O error instead, which counts
as a full disk only when the database's filesystem really refuses room now.
"""

from __future__ import annotations

import errno
import os
import shutil
import sqlite3
import tempfile
from pathlib import Path

from storage.errors import StoreError, StoreUnavailable

SQLITE_IOERR = 10
SQLITE_FULL = 13
LOW_SPACE_BYTES = 1 << 20  # less free than this beside the database, and it counts as full
PROBE_BYTES = 64 << 10  # what an I/O error's cause is tested with: room for a few pages
NO_ROOM = (errno.ENOSPC, errno.EDQUOT)


def store_error(path: str, exc: sqlite3.Error) -> StoreError:
    """`exc` as the store's error: StoreUnavailable when it failed for lack of space."""
    where = None if path == ":memory:" else Path(path).absolute().parent
    if not out_of_space(exc, where):
        error = StoreError(f"store {path}: {exc}")
    elif where is None or not has_room(where):
        error = StoreUnavailable(f"store {path}: the disk holding {where or path} is full "
                                 f"({exc}); writes wait until space is freed")
    else:  # SQLITE_FULL with room beside the database: its temporary files filled theirs
        error = StoreUnavailable(f"store {path}: a disk SQLite writes to is full ({exc}); "
                                 "its temporary files may live elsewhere (SQLITE_TMPDIR, "
                                 "TMPDIR); writes wait until space is freed")
    error.__cause__ = exc
    return error


def out_of_space(exc: sqlite3.Error, where: Path | None) -> bool:
    """Whether `exc` means the write found no room (SQLITE_FULL; an I/O error on a disk
    that has none)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if not isinstance(code, int):
        return False
    primary = code & 0xFF  # the extended code's low byte is the primary one
    if primary == SQLITE_FULL:
        return True
    return primary == SQLITE_IOERR and where is not None and not has_room(where)


def has_room(where: Path) -> bool:
    """Whether the filesystem holding the directory `where` takes a few more pages now,
    for this process's user (which a quota limits, and statvfs does not show)."""
    try:
        if shutil.disk_usage(where).free < LOW_SPACE_BYTES:
            return False
        with tempfile.TemporaryFile(dir=where, prefix=".space-check-") as probe:
            os.posix_fallocate(probe.fileno(), 0, PROBE_BYTES)
    except OSError as exc:
        return exc.errno not in NO_ROOM  # unreadable or read-only: not a question of space
    return True
