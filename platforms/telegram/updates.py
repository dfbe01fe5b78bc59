"""Reading one raw update, from getUpdates or a webhook POST, on its own.

python-telegram-bot parses a whole getUpdates batch at once, so one update it cannot read
(malformed, or from a Bot API newer than the library) fails every update with it. Here
each update is parsed alone; one that fails is logged once, by id and size only (its text
may be a user's words or a secret), counted, and dropped: reading it again would fail the
same way.
"""

from __future__ import annotations

import collections
import json
import logging

from telegram import Bot, Update

log = logging.getLogger(__name__)

# Counters (PlatformAdapter.counters): updates we could not read, and updates whose
# handling raised; both are skipped.
UNPARSEABLE = "unparseable_updates"
FAILED = "failed_updates"


def update_id_of(raw: object) -> int | None:
    """The update's id, when it has a usable one."""
    if not isinstance(raw, dict):
        return None
    value = raw.get("update_id")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def size_of(raw: object) -> int:
    """Bytes of `raw` as compact JSON, about what Telegram sent."""
    try:
        return len(json.dumps(raw, separators=(",", ":"), ensure_ascii=False).encode())
    except (TypeError, ValueError):
        return 0


def read_update(raw: object, bot: Bot, counters: collections.Counter[str], *,
                size: int | None = None) -> Update | None:
    """`raw` as an Update, or None when it is not one we can read (logged and counted)."""
    update_id = update_id_of(raw)
    try:
        if not isinstance(raw, dict) or update_id is None:
            raise ValueError("no update_id")
        return Update.de_json(raw, bot)
    except Exception as exc:  # whatever the library trips over: the update is unreadable
        counters[UNPARSEABLE] += 1
        # The exception's type only: its message may quote a value from the update.
        skipped(update_id, size if size is not None else size_of(raw),
                f"cannot be read ({type(exc).__name__})")
        return None


def skipped(update_id: int | None, size: int, why: str, *,
            error: BaseException | None = None) -> None:
    """One warning for an update we drop: its id and size, never its content. `error`
    adds a traceback, for a failure in our own code."""
    log.warning("telegram: update %s (%d bytes) %s; skipped",
                update_id if update_id is not None else "without an id", size, why,
                exc_info=error)
