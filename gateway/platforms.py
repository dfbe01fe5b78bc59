"""Adapters for the remote platforms enabled in config."""

from __future__ import annotations

import logging

from gateway.config import Config
from platforms.base import PlatformAdapter

log = logging.getLogger(__name__)


def remote_adapters(config: Config) -> list[PlatformAdapter]:
    """Telegram and Discord adapters; their implementations arrive with their own issues."""
    adapters: list[PlatformAdapter] = []
    for name in ("telegram", "discord"):
        if getattr(config.platforms, name).enabled:
            log.error("platform %s is enabled but not available in this version; skipping", name)
    return adapters
