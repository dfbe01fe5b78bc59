"""`threadline web`: the read-only web view (gateway/web/), as a process of its own;
`--new-token` prints a token for `web.token` and needs no config."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.config import Config


def new_token() -> None:
    from gateway.web.auth import new_token as make

    print(make())


async def main(args: argparse.Namespace, config: Config) -> int:
    from gateway.web.serve import serve_web

    return await serve_web(config, args.port)
