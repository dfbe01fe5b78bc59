"""Opening the SQLite file, in one of three ways, and the copy kept before an upgrade.

Only the service (`threadline run`, `threadline chat`) and `threadline migrate` change the
schema; every other command opens the file as it is and says when it needs an upgrade
(docs/operations.md, "Upgrades"):

- `upgrade`: create the file when there is none; an older schema is first copied beside
  it (`NAME.before-vN`, N the version being installed; the one copy kept until the next
  upgrade), then brought up to date;
- `current`: the file must exist and be of this release's schema (`web`, `compress`);
- `read`: read-only, the file untouched (`sessions`, `doctor`); on read-only media too.
- `copy`: read-only, any schema this release knows (`backup`).
"""

from __future__ import annotations

import logging
import os
import sqlite3
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

from storage import owner_only
from storage.errors import StoreError
from storage.sqlite import integrity, schema

log = logging.getLogger(__name__)

Access = Literal["upgrade", "current", "read", "copy"]
READ_ONLY: frozenset[Access] = frozenset({"read", "copy"})


def missing(path: str, access: Access) -> str | None:
    """Why a command that must not create the database cannot open `path`, or None."""
    if access == "upgrade" or path == ":memory:" or Path(path).is_file():
        return None
    if Path(path).exists():
        return f"{path} is not a database file"
    return (f"there is no database at {path}; `threadline run` or `threadline chat` "
            "creates it (check THREADLINE_HOME and storage.path)")


def connect(path: str, access: Access, busy_timeout_ms: int) -> sqlite3.Connection:
    """The connection, configured and at this release's schema; StoreError names the path."""
    try:
        if access == "upgrade" and path != ":memory:":
            owner_only.create_file(Path(path))  # its -wal and -shm take its mode
        db = plain(path, access, busy_timeout_ms / 1000, isolation_level=None,
                   check_same_thread=False)
    except (sqlite3.Error, OSError) as exc:
        raise StoreError(f"cannot open database {path}: {exc}") from exc
    try:
        if access in READ_ONLY:
            db.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            _check_version(db, path, access)
        else:
            schema.configure(db, busy_timeout_ms)
            if access == "upgrade":
                upgrade(db, path)
            else:
                _check_version(db, path, access)
    except BaseException as exc:
        db.close()
        if isinstance(exc, sqlite3.DatabaseError) and is_damage(exc):
            raise StoreError(integrity.damaged(path, str(exc))) from exc
        if isinstance(exc, sqlite3.Error):
            raise StoreError(f"cannot open database {path}: {exc}") from exc
        raise
    return db


def plain(path: str, access: Access, timeout_s: float, **options: Any) -> sqlite3.Connection:
    """A blocking connection to the file: read-only for the read-only ways, creating
    nothing beside the file. A WAL database without its -wal is open nowhere, and a
    read-only open would still create -wal and -shm (owned by whoever reads, maybe root,
    which the service then cannot open): it is read as immutable instead, as on read-only
    media, where SQLite cannot make them."""
    if access not in READ_ONLY or path == ":memory:":
        return sqlite3.connect(path, timeout=timeout_s, **options)
    uri = f"file:{quote(os.path.abspath(path))}?mode=ro"
    if not (_wal_mode(path) and not Path(f"{path}-wal").exists()):
        db = sqlite3.connect(uri, uri=True, timeout=timeout_s, **options)
        try:
            db.execute("PRAGMA user_version").fetchone()
            return db
        except sqlite3.OperationalError:
            db.close()
            if os.access(Path(path).parent, os.W_OK):
                raise
    return sqlite3.connect(uri + "&immutable=1", uri=True, timeout=timeout_s, **options)


def _wal_mode(path: str) -> bool:
    """Whether the file's header says WAL (bytes 18 and 19 are 2)."""
    try:
        with open(path, "rb") as f:
            return f.read(20)[18:20] == b"\x02\x02"
    except OSError:
        return False


def _check_version(db: sqlite3.Connection, path: str, access: Access) -> None:
    found = schema.user_version(db)
    schema.refuse_newer(found, path)
    if found < schema.SCHEMA_VERSION and access != "copy":
        raise StoreError(
            f"database {path} has schema version {found} and this release uses "
            f"{schema.SCHEMA_VERSION}: this database needs an upgrade; run the service once "
            "(`threadline run`), which keeps a copy of the old file beside it")


def upgrade(db: sqlite3.Connection, path: str) -> int:
    """Copy an older file aside, then migrate it. A new (empty) file is just created."""
    found = schema.user_version(db)
    schema.refuse_newer(found, path)
    if 0 < found < schema.SCHEMA_VERSION and path != ":memory:":
        kept = before_upgrade(path)
        for old in Path(path).parent.glob(f"{Path(path).name}.before-v*"):
            if old.name != Path(kept).name and not old.name.endswith(".partial"):
                old.unlink(missing_ok=True)
        integrity.copy_to(db, kept, path, record=False)
        log.warning("database %s is at schema version %d; a copy of it as it was is kept at "
                    "%s before the upgrade to %d", path, found, kept, schema.SCHEMA_VERSION)
    return schema.migrate(db, path)


def before_upgrade(path: str) -> str:
    """Where the copy of the file as it was before this release's upgrade is kept."""
    return f"{path}.before-v{schema.SCHEMA_VERSION}"


def is_damage(exc: sqlite3.DatabaseError) -> bool:
    text = str(exc).lower()
    return "not a database" in text or "malformed" in text or "corrupt" in text
