"""Logging setup: one handler on stderr, secrets redacted from every record."""

from __future__ import annotations

import json
import logging
import sys

from agent.redact import RedactingFilter
from gateway.config import Config


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {"at": self.formatTime(record), "level": record.levelname,
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
    for secret in config.secret_values():
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
    for noisy in ("httpx", "httpx2", "httpcore", "openai", "anthropic", "aiosqlite", "apscheduler"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
    return redactor
