"""`threadline run`: the gateway with every enabled platform, until a signal stops it."""

from __future__ import annotations

import argparse
import gc
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.config import Config
    from platforms.base import PlatformFactory


EXIT_ERROR = 1


async def main(args: argparse.Namespace, config: Config) -> int:
    from gateway.service.runlock import run_lock
    from gateway.wiring import platform_factories

    platforms = platform_factories(config, console=config.platforms.console.enabled)
    if not platforms:
        print("threadline: none of the enabled platforms is available in this version "
              "(the console is); enable platforms.console or use `threadline chat`",
              file=sys.stderr)
        return EXIT_ERROR
    with run_lock(config):  # one `run` per SQLite file, held until it ends
        return await serve(config, platforms, survive_hangup=True)


async def serve(config: Config, platforms: list[PlatformFactory], *,
                survive_hangup: bool) -> int:
    """Build the gateway on these platforms and run it (`run`, and `chat` in a terminal)."""
    from gateway.service.run import serve as run_loop
    from gateway.wiring import create_gateway

    gateway = create_gateway(config, platforms)
    # Everything imported and built so far lives as long as the process: moved out of
    # the collector's reach, a full collection no longer walks it (a pause of ~90 ms
    # every few turns otherwise, measured with streamed replies).
    gc.collect()
    gc.freeze()
    return await run_loop(gateway, survive_hangup=survive_hangup)
