"""`threadline backup PATH`: a consistent copy of the database, while the service runs."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.config import Config


EXIT_ERROR = 1


async def main(args: argparse.Namespace, config: Config) -> int:
    from gateway.store_open import build_store
    from storage.sqlite.integrity import unsafe_target

    # Before the store is opened: opening it already touches the live files.
    if not config.storage.url and (problem := unsafe_target(str(config.db_path), args.path)):
        print(f"threadline: backup refused: {problem}", file=sys.stderr)
        return EXIT_ERROR
    store = build_store(config, "copy")  # as it is: an older file's backup is not upgraded
    await store.initialize()
    try:
        await store.backup(args.path)
    finally:
        await store.shutdown()
    print(f"backed up {config.db_path} to {args.path}")
    return 0
