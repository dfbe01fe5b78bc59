"""Files at rest belong to the account that runs Threadline, and to no one else.

The CLI sets umask 077 at start; the functions here make the same promise when called
under any umask (a library user's, a test's): directories 0700, files 0600. SQLite gives
the -wal, -shm and journal files the database file's own mode, so a database created
0600 keeps its companions 0600 too.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600


def make_dirs(path: Path) -> None:
    """Create `path` and its missing parents, each 0700 (`mkdir -p` would give the
    parents the umask's mode); an existing directory keeps its mode."""
    missing: list[Path] = []
    while not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    if not path.is_dir():  # a file where a directory belongs
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(path))
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=DIR_MODE)
        except FileExistsError:  # another process made it meanwhile, or made a file
            if not directory.is_dir():
                raise


def create_file(path: Path) -> None:
    """Create `path` empty and 0600 unless it exists (SQLite would create it 0644)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        return
    os.close(fd)


def write_file(path: Path, data: bytes) -> None:
    """Write `path` whole with mode 0600, even when it already existed with another."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    with os.fdopen(fd, "wb") as f:
        os.fchmod(f.fileno(), FILE_MODE)
        f.write(data)


def exposure(directory: Path) -> str | None:
    """The warning for a state directory other accounts can reach, or None."""
    try:
        mode = stat.S_IMODE(directory.stat().st_mode)
    except OSError:
        return None
    if not mode & 0o077:
        return None
    if mode & 0o022:
        can = "write to"
    elif mode & 0o044:
        can = "read"
    else:
        can = "enter"
    return (f"{directory} holds the database, attachments and saved tool outputs, and "
            f"other accounts can {can} it (mode {mode:04o}); run `chmod 700 {directory}`")
