"""The words of `threadline --help` and of each command's `--help`: what it does, when to
use it, what it changes, and an example. Plain strings: building the help imports nothing
else (bench/cli_start.py)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping

TOP = ("""\
A chat gateway that never loses the thread: one agent behind Telegram, Discord
and this terminal, every conversation kept in one database (SQLite, or
PostgreSQL by storage.url).

The config file is --config, else $THREADLINE_CONFIG, else ./config.yaml, else
~/.config/threadline/config.yaml, else the defaults; the database lives in
$THREADLINE_HOME (default ~/.local/share/threadline) unless storage.path says
otherwise.
""", """\
exit status:
  0    done
  1    the command failed (one line on stderr says why)
  78   fix something first: a config mistake (the line names the file and
       the key), another `threadline run` on the same SQLite file, a local
       model without its extra
  130  interrupted (Ctrl-C)

examples:
  threadline chat                        talk to the agent in this terminal
  threadline run --config /etc/threadline/config.yaml
  threadline sessions list               what is stored
  threadline COMMAND --help              what one command does
""")

COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("""\
Start the gateway with every enabled platform (platforms.*) and serve until
SIGTERM or SIGINT, which let the turns in progress finish; SIGHUP is logged
and changes nothing. Creates the database if there is none, upgrades an older
one (keeping a copy beside it), and holds it: one `run` per SQLite file.
Exits 78 when something must be fixed first: a config mistake, another `run`
on the database, no platform enabled, a local model without its extra; 130
after a second SIGTERM or SIGINT (the turns in progress are left).
""", """\
example:
  threadline run --config /etc/threadline/config.yaml
"""),
    "chat": ("""\
Chat with the agent in this terminal, and only here: the Telegram and Discord
bots belong to `threadline run`, so this is safe beside the service. The
conversation is stored like any other (chat key console:ID). With piped input,
each line is one turn and the command exits after the last reply.
""", """\
examples:
  threadline chat
  printf 'hello\\nwhat did I just say?\\n' | threadline chat --chat scratch
"""),
    "sessions": ("""\
Read what the database holds: sessions, their messages, continuation chains,
and a full-text search. Changes nothing, never creates or upgrades the
database, and works while the service runs.
""", """\
examples:
  threadline sessions list --chat telegram:12345
  threadline sessions show SESSION_ID
"""),
    "sessions list": ("""\
One line per session: id, chat key, kind, end reason ("live" while in use),
message count, tokens in and out, and when it started (or the session it
continues).
""", """\
examples:
  threadline sessions list
  threadline sessions list --chat console:local --json
"""),
    "sessions show": ("""\
The stored messages of one session, in order, with the files attached to them.
Exits 1 when there is no such session.
""", """\
example:
  threadline sessions show SESSION_ID --json
"""),
    "sessions tip": ("""\
The id of the live end of a session's continuation chain: where the
conversation went on after compactions. Exits 1 when there is no such session.
""", """\
example:
  threadline sessions tip SESSION_ID
"""),
    "sessions search": ("""\
Full-text search over every stored message, compacted ones included: the
messages holding every word of QUERY, best first (50 at most), one line each
with its session, position, role and chat key.
""", """\
example:
  threadline sessions search "deploy friday" --chat telegram:12345
"""),
    "compress": ("""\
Compact one chat's conversation now, the same way as /compress in the chat:
the configured model summarizes the older turns (--focus: a topic kept in full
detail) and the conversation goes on in a new session linked to the old one.
Writes the database, which must be of this release's schema.
Exits 1 when the chat has no conversation.
""", """\
example:
  threadline compress telegram:12345 --focus "the migration plan"
"""),
    "backup": ("""\
Write a consistent copy of the SQLite database to PATH, safe while the service
writes. The live database is only read; a PATH that is the database itself (or
its -wal, -shm, a link to it) is refused. For PostgreSQL use pg_dump.
""", """\
example:
  threadline backup /var/lib/threadline/backup.db \\
      --config /etc/threadline/config.yaml
"""),
    "restore": ("""\
Put a backup made by `threadline backup` in place of the SQLite database,
after checking it; refused while any process has the database open, so stop
the service first. The database it replaces is moved aside, not deleted (the
command says where). For PostgreSQL use pg_restore.
""", """\
example:
  threadline restore /var/lib/threadline/backup.db
"""),
    "trajectories": ("""\
Offline tools for training data; nothing here touches the database.
""", """\
example:
  threadline trajectories compress runs.jsonl runs.short.jsonl
"""),
    "trajectories compress": ("""\
Make ShareGPT trajectories fit trajectories.target_max_tokens: the middle of
each long one is summarized by the auxiliary.compression model (the main model
when auto). Reads INPUT, writes OUTPUT and metrics beside it; the database is
not touched.
""", """\
example:
  threadline trajectories compress runs.jsonl runs.short.jsonl
"""),
    "doctor": ("""\
Check a setup, one line per check: the config, the database, the models and
the platform tokens (one free authenticated call to each provider and
platform). Only looks: the database is opened read-only, never created or
upgraded; safe beside the service.
Exits 0 when every check passes, 1 when any fails (a broken config included).
""", """\
example:
  threadline doctor --config /etc/threadline/config.yaml
"""),
    "web": ("""\
Serve the read-only web view of chats, continuation chains and spending on
web.listen (default 127.0.0.1), until SIGTERM or SIGINT. Sign-in needs
web.token; --new-token prints a random one and exits. The database must exist
and be of this release's schema.
Exits 1 when it cannot start (no token, the port taken).
""", """\
examples:
  threadline web --new-token
  threadline web --port 8480
"""),
    "migrate": ("""\
Copy the whole SQLite store into an empty PostgreSQL database and check that
the row counts are equal on both sides; then set storage.url. The SQLite file
stays where it is (an older one is first brought to this release's schema).
""", """\
example:
  threadline migrate --to postgresql://threadline:PASSWORD@localhost/threadline
"""),
}


def describe(top: argparse.ArgumentParser,
             groups: Mapping[str, argparse._SubParsersAction]) -> None:
    """Give `top` and every command in `groups` (keyed by the words before their names,
    e.g. "sessions ") their description and example, shown as written."""
    parsers = [("", top)] + [(prefix + name, parser) for prefix, group in groups.items()
                             for name, parser in group.choices.items()]
    for command, parser in parsers:
        words = TOP if not command else COMMANDS.get(command)
        if words is not None:  # tests/e2e/test_cli_help.py: every command has its words
            parser.description, parser.epilog = words
            parser.formatter_class = argparse.RawDescriptionHelpFormatter
