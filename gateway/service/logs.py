"""Logging setup: one handler on stderr, secrets redacted from every record."""

from __future__ import annotations

import json
import logging
import re
import sys
from datetime import UTC, datetime

from agent.redact import REDACTED, redact
from gateway.config import Config
from storage.urls import password_forms

# Discord's interaction and webhook tokens (each lets anyone answer as the bot for 15
# minutes) in URLs and in the gateway events discord.py logs at DEBUG. Linear patterns.
_URL_TOKEN = re.compile(r"(/(?:interactions|webhooks)/\d+/)[A-Za-z0-9._-]+")
_FIELD_TOKEN = re.compile(r"""(["']token["']\s{0,8}:\s{0,8}["'])[^"'\s]+""")


def redact_platform_tokens(text: str) -> str:
    text = _URL_TOKEN.sub(rf"\1{REDACTED}", text)
    return _FIELD_TOKEN.sub(rf"\1{REDACTED}", text)


# Loggers of libraries whose tracebacks say nothing more than the error: asyncpg's pool
# logs one at every try to reconnect while the database is down.
ONE_LINE = frozenset({"asyncpg.pool"})


class RedactingFilter(logging.Filter):
    """Redacts every record it sees. Attach it to handlers: logger filters skip propagation."""

    MIN_KNOWN_SECRET = 8  # shorter values would mask ordinary words in every log line

    def __init__(self, name: str = "") -> None:
        super().__init__(name)
        self._known: set[str] = set()
        self._known_pattern: re.Pattern[str] | None = None

    def add_known_secret(self, value: str | None) -> None:
        """Mask this exact configured value (bot token, API key) even if no pattern fits it."""
        if not value or len(value) < self.MIN_KNOWN_SECRET or value in self._known:
            return
        self._known.add(value)
        # Longest first, so a secret that contains another is masked whole.
        ordered = sorted(self._known, key=len, reverse=True)
        self._known_pattern = re.compile("|".join(re.escape(s) for s in ordered))

    def redact(self, text: str) -> str:
        """Exact configured secrets first (they may not fit a pattern), then the patterns."""
        pattern = self._known_pattern
        if pattern is not None:
            text = pattern.sub(REDACTED, text)
        return redact(redact_platform_tokens(text))

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # bad format args: keep what we have rather than lose the line
            message = f"{record.msg} {record.args!r}"
        if record.name in ONE_LINE and record.exc_info and record.exc_info[1] is not None:
            # A library retrying through an outage: its error in a word, not a traceback
            # at every try.
            message = f"{message} ({record.exc_info[1]!r})"
            record.exc_info, record.exc_text = None, None
        record.msg = self.redact(message)
        record.args = None
        if record.exc_info and not record.exc_text:
            # Tracebacks are rendered after filters run; render now so they are redacted too.
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redact(record.exc_text)
        if record.stack_info:
            record.stack_info = self.redact(record.stack_info)
        return True


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        # ISO 8601 in UTC, with its zone: a collector never guesses the server's clock.
        at = datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds")
        entry = {"at": at, "level": record.levelname,
                 "logger": record.name, "message": record.getMessage()}
        # RedactingFilter has already rendered and redacted the traceback into exc_text;
        # rendering exc_info again would bring back the secrets it removed.
        exc = record.exc_text or (self.formatException(record.exc_info)
                                  if record.exc_info else "")
        if exc:
            entry["exc"] = exc
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(config: Config, *, quiet: bool = False) -> RedactingFilter:
    """Route every log line through the redacting filter; `quiet` keeps a console chat clean."""
    redactor = RedactingFilter()
    # The storage password in every form a client error could echo (raw, percent-decoded).
    for secret in [*config.secret_values(), *password_forms(config.storage.url)]:
        redactor.add_known_secret(secret)
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(redactor)
    if config.logging.format == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    level = logging.getLevelName(config.logging.level)
    root.setLevel(max(level, logging.WARNING) if quiet else level)
    for noisy in ("httpx", "httpx2", "httpcore", "openai", "anthropic", "apscheduler"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
    return redactor
