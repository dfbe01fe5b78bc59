"""The `threadline` command line."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from gateway.cli_help import describe

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
    describe(p, {"": sub, "sessions ": ss, "trajectories ": ts})  # gateway/cli_help.py
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

        from gateway import doctor

        sys.exit(asyncio.run(doctor.run(getattr(args, "config", None))))
    if getattr(args, "new_token", False):
        from gateway.web.auth import new_token

        print(new_token())
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
            from gateway.wiring import require_local_model

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
    from gateway.logs import configure_logging
    from gateway.runlock import AlreadyRunning
    from storage.errors import StoreError
    from storage.owner_only import exposure

    interactive_console = args.command in ("chat", "run") and sys.stdin.isatty()
    configure_logging(config, quiet=interactive_console)
    exposed = exposure(config.db_path.parent)
    if exposed is not None:
        logging.getLogger(__name__).warning(exposed)
    try:
        if args.command in ("run", "chat"):
            return asyncio.run(_serve(args, config))
        return asyncio.run(_offline(args, config))
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


async def _serve(args: argparse.Namespace, config: Config) -> int:
    import gc
    from contextlib import nullcontext

    from gateway.runlock import run_lock
    from gateway.service import serve
    from gateway.wiring import console_platform, create_gateway, platform_factories

    run = args.command == "run"
    if run:
        platforms = platform_factories(config, console=config.platforms.console.enabled)
    else:  # `chat` is this terminal alone: the bots belong to `threadline run`
        platforms = [console_platform(args.chat)]
    if not platforms:
        print("threadline: none of the enabled platforms is available in this version "
              "(the console is); enable platforms.console or use `threadline chat`",
              file=sys.stderr)
        return EXIT_ERROR
    # One `run` per SQLite file, held until it ends; a `chat` or a read beside it is fine.
    with run_lock(config) if run else nullcontext():
        gateway = create_gateway(config, platforms)
        # Everything imported and built so far lives as long as the process: moved out of
        # the collector's reach, a full collection no longer walks it (a pause of ~90 ms
        # every few turns otherwise, measured with streamed replies).
        gc.collect()
        gc.freeze()
        return await serve(gateway, survive_hangup=run)


async def _offline(args: argparse.Namespace, config: Config) -> int:
    from gateway.store_open import build_store

    if args.command == "compress":
        return await _compress(args, config)
    if args.command == "backup":
        return await _backup(args, config)
    if args.command == "migrate":
        return await _migrate(args, config)
    if args.command == "web":
        from gateway.web.serve import serve_web

        return await serve_web(config, args.port)
    if args.command == "restore":
        from gateway import restore_cli

        return restore_cli.run(args, config)
    if args.command == "trajectories":
        from gateway import trajectories_cli

        return await trajectories_cli.run(args, config)
    store = build_store(config, "read")  # a read never changes the file, nor upgrades it
    await store.initialize()
    try:
        from agent.attachments.files import AttachmentFiles
        from gateway import sessions_cli

        files = AttachmentFiles(config.db_path.parent / "attachments")
        return await sessions_cli.run(store, args, files)
    finally:
        await store.shutdown()


async def _compress(args: argparse.Namespace, config: Config) -> int:
    from gateway.commands import finish_compress
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


async def _backup(args: argparse.Namespace, config: Config) -> int:
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


async def _migrate(args: argparse.Namespace, config: Config) -> int:
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


if __name__ == "__main__":
    main()
