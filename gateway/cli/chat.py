"""`threadline chat`: this terminal alone as a platform (the bots belong to `run`); a
`chat` beside a running service, or a read, is fine."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.config import Config


async def main(args: argparse.Namespace, config: Config) -> int:
    from gateway.cli.run import serve
    from gateway.wiring import console_platform

    return await serve(config, [console_platform(args.chat)], survive_hangup=False)
