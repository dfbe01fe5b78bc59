"""A small disk of a test's own: a tmpfs mounted on a directory, filled to the last byte
and freed again, as a database's disk fills under traffic and is cleaned up.

Mounting needs root (the suite runs as root on its machines); elsewhere the test is
skipped, saying why. The mount is always undone, also when the test fails.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

FILLER = ".filler"
CHUNK = 64 << 10


class SmallDisk:
    """A mounted tmpfs at `path`; `fill()` takes every free byte, `free()` gives it back."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.filler = path / FILLER

    @property
    def free_bytes(self) -> int:
        return shutil.disk_usage(self.path).free

    def fill(self) -> int:
        """Write the filler until the disk refuses more (ENOSPC); the bytes it took."""
        written = 0
        with self.filler.open("ab") as f:
            while True:
                try:
                    written += os.write(f.fileno(), b"\0" * CHUNK)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
        for size in (4096, 512, 1):  # the last part page that a 64 KiB write would not fit
            with contextlib.suppress(OSError), self.filler.open("ab") as f:
                while os.write(f.fileno(), b"\0" * size):
                    written += size
        return written

    def take(self, nbytes: int) -> None:
        """Add `nbytes` to the filler (the disk must have them)."""
        with self.filler.open("ab") as f:
            for _ in range(nbytes // CHUNK):
                os.write(f.fileno(), b"\0" * CHUNK)

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)


@contextlib.contextmanager
def small_disk(path: Path, size_mb: int) -> Iterator[SmallDisk]:
    """A `size_mb` tmpfs mounted on `path` (created) for the block; unmounted after."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs to fill needs root (run the suite as root)")
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,mode=0700",
                              "tmpfs", str(path)], capture_output=True, text=True)
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs on {path}: {mounted.stderr.strip()}")
    try:
        yield SmallDisk(path)
    finally:
        unmounted = subprocess.run(["umount", str(path)], capture_output=True, text=True)
        if unmounted.returncode:  # something still holds a file open there: detach it
            subprocess.run(["umount", "-l", str(path)], capture_output=True)
