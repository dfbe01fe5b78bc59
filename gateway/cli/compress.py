"""`threadline compress CHAT_KEY`: compact a chat now, the way /compress does."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.config import Config
    from gateway.service.app import Gateway


EXIT_ERROR = 1


async def main(args: argparse.Namespace, config: Config) -> int:
    from gateway.wiring import create_gateway

    async with create_gateway(config, access="current") as gateway:
        if gateway.cluster is None:  # one process owns the store: nobody to ask
            return await _compress(gateway, args)
        # Sharing a database, the tool takes the chat's lease as a process would, so its
        # writes are fenced like theirs; a running process holding the chat keeps it.
        async with gateway.cluster.alone(args.chat_key) as fence:
            if fence is None:
                print(f"threadline: {args.chat_key} is held by a running gateway process "
                      "right now; use /compress in the chat instead, or try again once it "
                      "has been quiet for a while", file=sys.stderr)
                return EXIT_ERROR
            from storage.coordination import fenced
            with fenced(fence):
                return await _compress(gateway, args)
    return EXIT_ERROR  # not reached: every path inside returns (a type checker cannot know)


async def _compress(gateway: Gateway, args: argparse.Namespace) -> int:
    from gateway.turns.commands import finish_compress

    conversations = gateway.conversations
    prepared = await conversations.prepare_compaction(args.chat_key, args.focus)
    if prepared is None:
        print(f"threadline: there is no conversation for {args.chat_key}; "
              "`threadline sessions list` shows the chat keys", file=sys.stderr)
        return EXIT_ERROR
    print(await finish_compress(conversations, args.chat_key, prepared))
    return 0


