"""The `threadline` command line: its arguments, the checks every command shares, and the
call of one subcommand's module (gateway/cli/)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from gateway.cli.help import describe

# Each command imports what it needs when it runs: `--help` loads argparse alone, and the
# commands that only read the database load the config and the store, no provider or
# platform library (tests/e2e/test_cli_imports.py; bench/cli_start.py times it).
if TYPE_CHECKING:
    from gateway.config import Config

EXIT_ERROR = 1
# Commands that write the database (or create it): the others run on read-only media.
_WRITERS = ("run", "chat", "compress", "web", "restore")


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", default=argparse.SUPPRESS, help="path to config.yaml")
    p = argparse.ArgumentParser(prog="threadline", parents=[common])
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("run", parents=[common], help="start the gateway with every enabled platform")
    chat = sub.add_parser("chat", parents=[common], help="chat in this terminal")
    chat.add_argument("--chat", default="local", help="console chat id (default: local)")
    sessions = sub.add_parser("sessions", parents=[common], help="inspect stored sessions")
    ss = sessions.add_subparsers(dest="action", required=True)
    lst = ss.add_parser("list", parents=[common], help="list sessions")
    lst.add_argument("--chat", dest="chat_key", default=None, help="only this chat key")
    lst.add_argument("--json", action="store_true", help="JSON instead of the table")
    show = ss.add_parser("show", parents=[common], help="the messages of one session")
    show.add_argument("session_id", help="an id from `threadline sessions list`")
    show.add_argument("--json", action="store_true", help="JSON instead of text")
    tip = ss.add_parser("tip", parents=[common], help="the live end of a session's chain")
    tip.add_argument("session_id", help="any session of the chain")
    search = ss.add_parser("search", parents=[common], help="full-text search of all messages")
    search.add_argument("query", help="words that must all occur (punctuation is plain text)")
    search.add_argument("--chat", dest="chat_key", default=None, help="only this chat key")
    comp = sub.add_parser("compress", parents=[common], help="compact a chat now")
    comp.add_argument("chat_key", help="e.g. console:local or telegram:12345")
    comp.add_argument("--focus", default=None, help="a topic to keep in full detail")
    backup = sub.add_parser("backup", parents=[common],
                            help="copy the database, consistently, while the service runs")
    backup.add_argument("path", help="where to write the copy (an existing file is replaced)")
    restore = sub.add_parser("restore", parents=[common],
                             help="put a backup in place of the database (service stopped)")
    restore.add_argument("backup", help="a file made by `threadline backup` (or a "
                         "threadline.db.before-vN copy, to go back before an upgrade)")
    traj = sub.add_parser("trajectories", parents=[common], help="training data tools")
    ts = traj.add_subparsers(dest="action", required=True)
    tc = ts.add_parser("compress", parents=[common],
                       help="make ShareGPT trajectories fit trajectories.target_max_tokens")
    tc.add_argument("input", help="JSONL of ShareGPT entries")
    tc.add_argument("output", help="where to write them (metrics beside it)")
    sub.add_parser("doctor", parents=[common],
                   help="check config, database, providers and platform tokens")
    webp = sub.add_parser("web", parents=[common],
                          help="the read-only web view of chats, chains and spending")
    webp.add_argument("--port", type=int, default=None, help="default: web.port, else 8480")
    webp.add_argument("--new-token", action="store_true",
                      help="print a random token for web.token and exit")
    mig = sub.add_parser("migrate", parents=[common],
                         help="copy the SQLite store into an empty PostgreSQL database")
    mig.add_argument("--from", dest="source", default=None,
                     help="sqlite:PATH (default: the configured database file)")
    mig.add_argument("--to", dest="target", default=None,
                     help="postgresql://user:password@host/db (default: storage.url)")
    describe(p, {"": sub, "sessions ": ss, "trajectories ": ts})  # gateway/cli/help.py
    return p


def main(argv: Sequence[str] | None = None) -> None:
    # Everything this process creates (database, backups, attachments, saved tool outputs)
    # is its owner's alone, whatever umask it was started with (docs/operations.md).
    os.umask(0o077)
    args = _parser().parse_args(argv)
    if args.command == "run":  # a hangup while starting is as harmless as one later
        import signal

        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    if args.command == "doctor":  # reports a broken config as one of its checks
        import asyncio

        from gateway.cli.doctor import checks

        sys.exit(asyncio.run(checks.run(getattr(args, "config", None))))
    if getattr(args, "new_token", False):
        from gateway.cli import web

        web.new_token()
        sys.exit(0)
    from gateway.config import (
        EXIT_CONFIG,
        ConfigError,
        check_storage_writable,
        require_platforms,
        resolve_config,
    )

    try:
        config = resolve_config(getattr(args, "config", None))
        if args.command == "run":
            require_platforms(config)
        if args.command in ("run", "chat", "compress"):
            from gateway.wiring.settings import require_local_model

            require_local_model(config)
        if args.command in _WRITERS:  # the others read, or write elsewhere
            check_storage_writable(config)
    except ConfigError as exc:
        print(f"threadline: {exc}", file=sys.stderr)
        sys.exit(EXIT_CONFIG)
    sys.exit(_dispatch(args, config))


def _dispatch(args: argparse.Namespace, config: Config) -> int:
    import asyncio
    import logging

    from agent.errors import AgentError, EngineNotFoundError
    from gateway.config import EXIT_CONFIG
    from gateway.service.logs import configure_logging
    from gateway.service.runlock import AlreadyRunning
    from storage.errors import StoreError
    from storage.owner_only import exposure

    interactive_console = args.command in ("chat", "run") and sys.stdin.isatty()
    configure_logging(config, quiet=interactive_console)
    exposed = exposure(config.db_path.parent)
    if exposed is not None:
        logging.getLogger(__name__).warning(exposed)
    try:
        return asyncio.run(_command(args, config))
    # context.engine names nothing we can load, or another gateway has the database:
    # a restart would change neither.
    except (EngineNotFoundError, AlreadyRunning) as exc:
        print(f"threadline: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except (StoreError, AgentError) as exc:
        print(f"threadline: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130


async def _command(args: argparse.Namespace, config: Config) -> int:
    """The subcommand's own module, gateway/cli/<command>.py, imported only now: each
    command loads what it needs and nothing more."""
    import importlib

    return await importlib.import_module(f"gateway.cli.{args.command}").main(args, config)
