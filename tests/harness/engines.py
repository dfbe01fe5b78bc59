"""Context engines written to the documented plugin contract, for gateway tests.

They are installed the way an operator installs a plugin: a directory under
`<data_dir>/plugins/context_engine/<name>/` whose `__init__.py` imports from here. Their
compaction is trivially visible in the store: it drops the oldest turn, so every
compaction that runs makes a continuation with one message fewer.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

from agent.context_engine import ContextEngine


class DropOldest(ContextEngine):
    """The documented signature exactly: `compress(messages, current_tokens, focus_topic)`."""

    def __init__(self, settings: Any) -> None:
        self.context_length = settings.context_length
        self.threshold_tokens = int(settings.context_length * 0.85)

    @property
    def name(self) -> str:
        return "drop-oldest"

    def update_from_response(self, usage: Any) -> None:
        self.last_prompt_tokens = usage.prompt_tokens

    def should_compress(self, prompt_tokens: int | None = None) -> bool:
        tokens = self.last_prompt_tokens if prompt_tokens is None else prompt_tokens
        return tokens >= self.threshold_tokens

    def drop(self, messages: list[dict[str, Any]], count: int) -> list[dict[str, Any]]:
        start = 1 if messages and messages[0].get("role") == "system" else 0
        keep_from = min(start + count, len(messages) - 1)  # the newest message always stays
        if keep_from <= start:
            return list(messages)
        self.compression_count += 1
        return [*messages[:start], *messages[keep_from:]]

    async def compress(self, messages: list[dict[str, Any]], current_tokens: int | None = None,
                       focus_topic: str | None = None) -> list[dict[str, Any]]:
        return self.drop(list(messages), 1)


class ForceAware(DropOldest):
    """Declares the optional keyword `force`: a manual /compress drops two turns, not one."""

    @property
    def name(self) -> str:
        return "force-aware"

    async def compress(self, messages: list[dict[str, Any]], current_tokens: int | None = None,
                       focus_topic: str | None = None, *, force: bool = False
                       ) -> list[dict[str, Any]]:
        return self.drop(list(messages), 2 if force else 1)


class BlocksTheLoop(DropOldest):
    """Misbehaves on purpose: holds the event loop for two seconds after each model call,
    the way a plugin doing CPU work or blocking I/O outside a thread would."""

    block_s = 2.0

    @property
    def name(self) -> str:
        return "blocks-the-loop"

    def update_from_response(self, usage: Any) -> None:
        time.sleep(self.block_s)  # on the loop, not in a thread: the point of this engine
        super().update_from_response(usage)


def install_plugin(data_dir: Path, name: str, cls: str) -> None:
    """Put engine `cls` of this module in the plugin directory as context engine `name`."""
    directory = data_dir / "plugins" / "context_engine" / name
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "__init__.py").write_text(
        f"from tests.harness.engines import {cls}\n\n\n"
        f"def create_engine(settings):\n    return {cls}(settings)\n")


class RemembersEnds(DropOldest):
    """Notes every `on_session_end` it hears of (session id, transcript length), class-wide,
    so a test can see a session end reach its engine."""

    ended: list[tuple[str, int]] = []  # noqa: RUF012 - shared on purpose, across instances

    @property
    def name(self) -> str:
        return "remembers-ends"

    def on_session_end(self, session_id: str, messages: list[dict[str, Any]]) -> None:
        RemembersEnds.ended.append((session_id, len(messages)))


class KillsOnMarker(DropOldest):
    """Poison on purpose: SIGKILLs its own process when the newest message holds MARKER,
    the way a plugin or library crashing hard on one input would. Every other turn runs."""

    MARKER = "POISON-PILL"

    @property
    def name(self) -> str:
        return "kills-on-marker"

    def should_compress_preflight(self, messages: list[dict[str, Any]], *args: Any,
                                  **kwargs: Any) -> bool:
        if messages and self.MARKER in str(messages[-1].get("content")):
            os.kill(os.getpid(), signal.SIGKILL)
        return False
