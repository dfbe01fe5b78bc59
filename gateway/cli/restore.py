"""`threadline restore BACKUP`: the library call (storage/sqlite/restore.py) and its words."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.config import Config


async def main(args: argparse.Namespace, config: Config) -> int:
    from storage.errors import StoreError
    from storage.sqlite.restore import restore

    if config.storage.url:
        print("threadline: restore puts back a SQLite file; a PostgreSQL database is "
              "restored with its own tools (pg_restore)", file=sys.stderr)
        return 1
    try:
        done = restore(str(config.db_path), args.backup)
    except (StoreError, OSError) as exc:
        print(f"threadline: restore refused: {exc}", file=sys.stderr)
        return 1
    print(f"restored {done.backup} into {done.database} (schema version {done.version})")
    if done.aside is not None:
        print(f"the database it replaced is kept at {done.aside} (with its -wal/-shm, if any)")
    print("start the service to go on; an older schema is upgraded then, "
          "keeping a copy beside it")
    return 0
