"""`threadline doctor`'s look at the store: the SQLite file (and the room left on its
disk), or the PostgreSQL database that `storage.url` names. It opens either one read-only
and creates nothing; a URL is shown with its password masked (storage/urls.py)."""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
import tempfile
from pathlib import Path

import asyncpg

from agent.errors import plain_error
from gateway.cli.doctor.result import NETWORK_TIMEOUT_S, Result, network_reason
from gateway.config import Config
from storage.owner_only import exposure
from storage.urls import ambiguous, mask_url, scrub

SQLITE_MAGIC = b"SQLite format 3\x00"
# Refusals that name the account: the URL's user or password is wrong.
REFUSED = (asyncpg.InvalidPasswordError, asyncpg.InvalidAuthorizationSpecificationError)
# Less room than either, and the disk is nearly full: once it is, no message can be stored.
LOW_SPACE_BYTES = 100 * 1000 * 1000
LOW_SPACE_SHARE = 0.05


async def check_storage(config: Config) -> Result:
    """The configured store, whichever backend; a state directory that other accounts can
    reach is noted (the service warns about it at start)."""
    if config.storage.url:
        result = await check_postgres(config.storage.url)
    else:
        result = await asyncio.to_thread(check_database, config)
        crowded = await asyncio.to_thread(low_space, config.db_path.parent)
        if crowded is not None:
            result = Result(result.check, False, f"{result.detail}; {crowded}")
    exposed = exposure(config.db_path.parent)
    if exposed is None:
        return result
    return Result(result.check, result.ok, f"{result.detail}; warning: {exposed}")


async def check_postgres(url: str) -> Result:
    """Connect (a short timeout) and read the schema version; change nothing."""
    label = mask_url(url)
    if ambiguous(url):
        return Result("database", False, f"{label}: the password holds a raw @, /, ? or #; "
                                         "percent-encode it (docs/storage.md)")
    try:
        con = await asyncpg.connect(url, timeout=NETWORK_TIMEOUT_S)
    except (OSError, TimeoutError) as exc:
        return Result("database", False, f"{label} unreachable ({network_reason(exc)})")
    except (ValueError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        reason = plain_error(scrub(str(exc), url), limit=160)
        hint = "; check storage.url" if isinstance(exc, REFUSED) else ""
        return Result("database", False, f"{label} cannot be opened ({reason}){hint}")
    try:
        version = await con.fetchval("SELECT max(version) FROM schema_version")
    except asyncpg.UndefinedTableError:
        return Result("database", True, f"{label} is empty; it will be set up")
    except (asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        return Result("database", False, f"{label} cannot be read "
                                         f"({plain_error(scrub(str(exc), url), limit=160)})")
    finally:
        await con.close()
    from storage.postgres.schema import SCHEMA_VERSION

    return _judge_version(label, int(version or 0), SCHEMA_VERSION)


def _judge_version(label: str, version: int, newest: int) -> Result:
    """A database's schema against `newest`, the newest this release knows."""
    if version > newest:
        return Result("database", False, f"{label} has schema v{version}, newer than this "
                                         f"Threadline understands (v{newest}); "
                                         "upgrade Threadline")
    if version < newest:
        return Result("database", True, f"{label}: schema v{version}: this database needs an "
                                        f"upgrade to v{newest}; the service does it when it "
                                        "next starts, keeping a copy of the old file")
    return Result("database", True, f"{label}: schema v{version}")


def check_database(config: Config) -> Result:
    """The directory is writable; an existing file is healthy SQLite at a schema we know."""
    db = config.db_path
    hint = "choose a writable path" if config.storage.path else \
        "set THREADLINE_HOME or storage.path"
    problem = _unwritable(db)
    if problem is not None:
        return Result("database", False, f"cannot write {db} ({problem}); {hint}")
    if not db.exists():
        return Result("database", True, f"{db} does not exist yet; it will be created")
    return _inspect(db)


def low_space(directory: Path) -> str | None:
    """Why the disk that holds (or will hold) `directory` is nearly full; None when it has
    room (at least LOW_SPACE_BYTES and LOW_SPACE_SHARE of it free for the service)."""
    existing = _nearest_existing(directory)
    try:
        usage = shutil.disk_usage(existing)
    except OSError:
        return None  # the writability check says what is wrong with the place
    if usage.free >= LOW_SPACE_BYTES and usage.free >= usage.total * LOW_SPACE_SHARE:
        return None
    share = usage.free / usage.total if usage.total else 0.0
    return (f"the disk holding {existing} is nearly full: {_amount(usage.free)} free "
            f"({share:.1%} of {_amount(usage.total)}); when it is full no message can be "
            "stored until space is freed")


def _amount(size: int) -> str:
    for unit, scale in (("GB", 1000**3), ("MB", 1000**2), ("kB", 1000)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} bytes"


def _nearest_existing(path: Path) -> Path:
    """`path`, or its nearest parent that exists (the store creates the rest)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _unwritable(db: Path) -> str | None:
    """Why the store could not create or write `db`, without creating anything lasting."""
    try:
        if db.is_dir():
            return "it is a directory"
        # The store creates missing directories; what matters is the nearest that exists.
        existing = _nearest_existing(db.parent)
        if not existing.is_dir():
            return f"{existing} is not a directory"
        with tempfile.TemporaryFile(dir=existing):
            pass  # os.access says yes to root even on read-only mounts; a real file is sure
        if db.exists() and not os.access(db, os.R_OK | os.W_OK):
            return "permission denied"
    except OSError as exc:
        return (exc.strerror or str(exc)).lower()
    return None


def _inspect(db: Path) -> Result:
    try:
        with db.open("rb") as f:
            header = f.read(100)
    except OSError as exc:
        return Result("database", False, f"cannot read {db} ({(exc.strerror or '').lower()})")
    if not header:
        return Result("database", True, f"{db} is empty; it will be set up")
    if not header.startswith(SQLITE_MAGIC):
        return Result("database", False, f"{db} is not a SQLite database (damaged, or another "
                                         "file); `threadline restore BACKUP` puts a backup in its "
                                         "place")
    try:
        version, verdict = _read_only_check(db)
    except sqlite3.Error as exc:
        return Result("database", False, f"{db} cannot be read ({plain_error(exc)}); "
                                         "`threadline restore BACKUP` puts a backup in its place")
    return _judge(db, version, verdict)


def _read_only_check(db: Path) -> tuple[int, str]:
    """(user_version, quick_check verdict), opened as the read-only commands open it: SQLite
    writes nothing and creates nothing beside the file (storage/sqlite/opening.py)."""
    from storage.sqlite.opening import plain

    conn = plain(str(db), "read", 2.0)
    try:
        rows = conn.execute("PRAGMA quick_check").fetchall()
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    finally:
        conn.close()
    return version, "; ".join(str(row[0]) for row in rows[:3])


def _judge(db: Path, version: int, verdict: str) -> Result:
    from storage.sqlite.schema import SCHEMA_VERSION

    if verdict != "ok":
        return Result("database", False, f"{db} is damaged (quick_check: {plain_error(verdict)});"
                                         " `threadline restore BACKUP` puts a backup in its place")
    return _judge_version(str(db), version, SCHEMA_VERSION)

