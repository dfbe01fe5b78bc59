"""Whether a message is a command, and which: `/name@bot args`. What a command does, and
when it runs, is the command table's business (turns/commands.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass

_COMMAND = re.compile(r"^/([A-Za-z0-9_]{1,32})(?:@(\w+))?(?:\s+(.*))?$", re.DOTALL)


@dataclass(frozen=True)
class Invocation:
    """A message that is a command: `/name@bot args`."""

    name: str
    args: str
    bot: str | None = None


def parse_command(text: str) -> Invocation | None:
    """`/cmd`, `/cmd@bot args`, any case; text like `/usr/bin` is not a command."""
    match = _COMMAND.match(text.strip())
    if not match:
        return None
    return Invocation(match.group(1).lower(), (match.group(3) or "").strip(), match.group(2))
