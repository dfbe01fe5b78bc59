"""A reply as a platform's messages, rendered where rendering cannot stall the bot.

An adapter whose rendering is costly or not linear in its input (Telegram: a third-party
Markdown converter) names a `formatter`; it runs in worker processes of its own with a
time budget, and a reply it cannot render in time goes out as plain text, every word
kept (docs/architecture.md, "Untrusted work"). Other adapters render where they are called.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from gateway.offload import WorkerPool
from platforms.base import ChatRef, Chunk, PlatformAdapter
from platforms.text import markdown_balanced

log = logging.getLogger(__name__)

RENDER_BUDGET_S = 3.0  # a reply of any size renders in milliseconds; this is far past it
RENDERERS = 2  # worker processes rendering at once


def render_pool() -> WorkerPool:
    return WorkerPool("render", size=RENDERERS, memory_mb=512,
                      preload=("platforms.telegram.format",))


class Renderer:
    """Renders replies for each platform; a pool is started only when one needs it."""

    def __init__(self, adapters: Mapping[str, PlatformAdapter],
                 pool: WorkerPool | None = None, budget_s: float = RENDER_BUDGET_S) -> None:
        self.adapters = adapters
        self.pool = pool or render_pool()
        self.budget_s = budget_s
        self.fallbacks = 0  # replies sent plain because formatting failed or ran over
        self._jobs: set[asyncio.Future[list[Chunk]]] = set()

    async def render(self, chat: ChatRef, text: str) -> list[Chunk]:
        adapter = self.adapters.get(chat.platform)
        if adapter is None:
            return [Chunk(text)]
        if adapter.formatter is None:
            return adapter.render(text)
        return await self._formatted(adapter, text)

    async def render_partial(self, chat: ChatRef, text: str) -> list[Chunk]:
        """An unfinished reply: formatted where its Markdown is complete, else plain."""
        adapter = self.adapters[chat.platform]
        if adapter.formatter is None:
            return adapter.render_partial(text)
        if not markdown_balanced(text):
            return adapter.render_plain(text)
        return await self._formatted(adapter, text)

    async def _formatted(self, adapter: PlatformAdapter, text: str) -> list[Chunk]:
        formatter = adapter.formatter
        assert formatter is not None
        # A caller that gives up (a preview pump stopping) leaves the job to finish within
        # its budget: cancelling it would kill a worker that is about to be free.
        job = asyncio.ensure_future(self.pool.run(formatter, text, budget_s=self.budget_s))
        self._jobs.add(job)
        job.add_done_callback(self._jobs.discard)
        job.add_done_callback(_consume)
        try:
            return await asyncio.shield(job)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # WorkFailed (over the budget, a dead worker) or a bug
            self.fallbacks += 1
            log.warning("%s: formatting a reply of %d characters failed (%s); it goes out "
                        "as plain text", adapter.name, len(text), exc)
            return adapter.render_plain(text)

    async def aclose(self) -> None:
        await self.pool.close()
        await asyncio.gather(*self._jobs, return_exceptions=True)  # they fail at once now


def _consume(job: asyncio.Future[list[Chunk]]) -> None:
    if not job.cancelled():
        job.exception()  # an abandoned job's failure was already dealt with, or is moot
