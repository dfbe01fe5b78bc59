"""`threadline compress CHAT_KEY`: compact a chat now, the way /compress does."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.config import Config


EXIT_ERROR = 1


async def main(args: argparse.Namespace, config: Config) -> int:
    from gateway.turns.commands import finish_compress
    from gateway.wiring import create_gateway

    async with create_gateway(config, access="current") as gateway:
        conversations = gateway.conversations
        prepared = await conversations.prepare_compaction(args.chat_key, args.focus)
        if prepared is None:
            print(f"threadline: there is no conversation for {args.chat_key}; "
                  "`threadline sessions list` shows the chat keys", file=sys.stderr)
            return EXIT_ERROR
        print(await finish_compress(conversations, args.chat_key, prepared))
    return 0
