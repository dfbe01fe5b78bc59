"""A whole JSONL file of trajectories, streamed: entries are read one line at a time,
compressed concurrently (at most `max_concurrent_requests` summaries at once, each entry
within `per_entry_timeout_s`) and written in their input order.

Outputs: OUT (one line per input line), OUT with `.metrics.jsonl` (one line per entry,
same order) and `.metrics.json` (the totals). A failed or timed-out entry and a malformed
line are written through unchanged and listed in the report; nothing is dropped and no
placeholder summary is ever written.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from agent.compression.summarizer import Summarizer
from agent.compression.trajectory import (
    EntryMetrics,
    Malformed,
    TrajectorySettings,
    compress_entry,
    parse_entry,
    turn_tokens,
)
from agent.errors import plain_error
from agent.providers.base import Provider

log = logging.getLogger(__name__)

Progress = Callable[[int], Any]  # called with the number of entries just finished


@dataclass
class Report:
    totals: dict[str, Any] = field(default_factory=lambda: {
        "entries": 0, "compressed": 0, "under_target": 0, "uncompressible": 0, "failed": 0,
        "malformed": 0, "still_over_limit": 0, "tokens_before": 0, "tokens_after": 0,
        "turns_removed": 0})
    problems: list[str] = field(default_factory=list)  # "line N: what happened"

    def add(self, line: int, metrics: EntryMetrics | None, problem: str | None) -> None:
        t = self.totals
        t["entries"] += 1
        if problem:
            self.problems.append(f"line {line}: {problem}")
        if metrics is None:
            t["malformed"] += 1
            return
        t[metrics.status] += 1
        t["still_over_limit"] += metrics.still_over_limit
        t["tokens_before"] += metrics.tokens_before
        t["tokens_after"] += metrics.tokens_after
        t["turns_removed"] += metrics.turns_removed

    def final(self) -> dict[str, Any]:
        before = self.totals["tokens_before"]
        ratio = round(self.totals["tokens_after"] / before, 4) if before else 1.0
        return {**self.totals, "ratio": ratio}


def metrics_paths(out: Path) -> tuple[Path, Path]:
    return out.with_suffix(".metrics.jsonl"), out.with_suffix(".metrics.json")


def _lines(source: IO[str]) -> Iterator[tuple[int, str]]:
    for number, line in enumerate(source, 1):
        if line.strip():
            yield number, line.rstrip("\n")


class TrajectoryBatch:
    def __init__(self, provider: Provider, settings: TrajectorySettings, *,
                 window: int | None = None) -> None:
        self.settings = settings
        self.summarizer = Summarizer(provider, window=window or provider.context_length,
                                     budget=settings.summary_target_tokens)
        # The local model answers one call at a time: more in flight would only wait inside
        # it, on the entries' clocks.
        self._slots = asyncio.Semaphore(1 if provider.kind == "local"
                                        else settings.max_concurrent_requests)

    async def _one(self, number: int, line: str
                   ) -> tuple[str, dict[str, Any], EntryMetrics | None, str | None]:
        """(line to write, its metrics line, metrics, problem)."""
        try:
            entry = parse_entry(line)
        except Malformed as exc:
            return line, {"line": number, "status": "malformed", "error": str(exc)}, None, \
                f"malformed, copied through: {exc}"
        try:
            async with self._slots, asyncio.timeout(self.settings.per_entry_timeout_s):
                out, metrics = await compress_entry(entry, self.settings, self.summarizer)
        except TimeoutError:
            why = f"timed out after {self.settings.per_entry_timeout_s:g} s"
            return self._unchanged(number, line, entry, why)
        except Exception as exc:  # a summary that failed in any way: keep the entry whole
            return self._unchanged(number, line, entry, plain_error(exc, limit=200))
        written = line if out is entry else json.dumps(out, ensure_ascii=False)
        return written, {"line": number, **metrics.as_dict()}, metrics, None

    def _unchanged(self, number: int, line: str, entry: dict[str, Any], why: str
                   ) -> tuple[str, dict[str, Any], EntryMetrics, str]:
        tokens = sum(turn_tokens(t) for t in entry["conversations"])
        metrics = EntryMetrics(tokens, tokens, 0, tokens > self.settings.target_max_tokens,
                               "failed", why)
        return line, {"line": number, **metrics.as_dict()}, metrics, \
            f"summary failed, written unchanged: {why}"

    async def run(self, source: IO[str], out: IO[str], metrics_out: IO[str],
                  progress: Progress = lambda n: None) -> Report:
        """Stream `source` to `out`, keeping at most twice the concurrency in flight."""
        report = Report()
        window = 2 * self.settings.max_concurrent_requests
        pending: deque[tuple[int, asyncio.Task[Any]]] = deque()

        async def flush_one() -> None:
            number, task = pending.popleft()
            written, metrics_line, metrics, problem = await task
            out.write(written + "\n")
            metrics_out.write(json.dumps(metrics_line) + "\n")
            report.add(number, metrics, problem)
            progress(1)

        for number, line in _lines(source):
            pending.append((number, asyncio.create_task(self._one(number, line))))
            if len(pending) >= window:
                await flush_one()
        while pending:
            await flush_one()
        return report


async def compress_file(source: Path, target: Path, provider: Provider,
                        settings: TrajectorySettings, progress: Progress = lambda n: None,
                        *, window: int | None = None) -> Report:
    lines_path, totals_path = metrics_paths(target)
    batch = TrajectoryBatch(provider, settings, window=window)
    with source.open(encoding="utf-8") as src, target.open("w", encoding="utf-8") as out, \
            lines_path.open("w", encoding="utf-8") as metrics_out:
        report = await batch.run(src, out, metrics_out, progress)
    totals_path.write_text(json.dumps(report.final(), indent=2) + "\n", encoding="utf-8")
    return report
