"""`threadline migrate`: the SQLite store copied into an empty PostgreSQL database
(storage/migrate.py)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.config import Config


EXIT_ERROR = 1


async def main(args: argparse.Namespace, config: Config) -> int:
    from storage.migrate import copy_store, parse_source, summary
    from storage.urls import mask_url

    target = args.target or config.storage.url
    if not target:
        print("threadline: say where to copy to: --to postgresql://... or storage.url",
              file=sys.stderr)
        return EXIT_ERROR
    source = parse_source(args.source or f"sqlite:{config.db_path}")
    copied = await copy_store(source, target)
    print(f"copied {source} into {mask_url(target)}: {summary(list(copied.counts.items()))}"
          " (row counts equal on both sides)")
    return 0
