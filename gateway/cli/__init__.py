"""The `threadline` command: dispatch.py reads the arguments and calls one module per
subcommand (run, chat, sessions, compress, backup, restore, migrate, doctor/,
trajectories, web), each a thin caller of the library; help.py holds the words of
`--help`. Every subcommand imports what it needs when it runs, so `--help` loads the
standard library alone and a read of the database no provider or platform library.

May import: anything in the gateway.
"""

from gateway.cli.dispatch import main

__all__ = ["main"]
