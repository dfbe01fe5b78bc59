"""Throughput of `threadline trajectories compress` with an instant summarizer, and its
peak memory beside the input's size (the input is streamed, never loaded whole).

Prints entries/s (median of 3 runs over 1,000 entries) and the peak resident memory.
Run: .venv/bin/python bench/trajectories.py
"""

from __future__ import annotations

import asyncio
import json
import random
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.compression.trajectory import TrajectorySettings  # noqa: E402
from agent.compression.trajectory_batch import compress_file  # noqa: E402
from agent.providers.base import Completion, Provider, ProviderSettings  # noqa: E402
from agent.usage import CanonicalUsage  # noqa: E402
from tests.harness.trajectories import entry  # noqa: E402

ENTRIES = 1_000
SUMMARY = ("## Active Task\nFinish the task.\n## Goal\nComplete the numbered task with the "
           "tools at hand.\n## Completed Actions\n1. Ran the tools; their results were long "
           "lists of words.\n## Critical Context\nNothing secret was involved.")


class InstantSummarizer(Provider):
    kind = "instant"

    async def complete(self, messages: list[dict[str, Any]], **kw: Any) -> Completion:
        return Completion({"role": "assistant", "content": SUMMARY}, CanonicalUsage(), "instant")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def one_run(source: Path, target: Path) -> float:
    provider = InstantSummarizer(ProviderSettings(provider="instant", model="instant",
                                                  context_length=32_000))
    started = time.perf_counter()
    await compress_file(source, target, provider, TrajectorySettings())
    return ENTRIES / (time.perf_counter() - started)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "in.jsonl"
        rng = random.Random(7)
        with source.open("w") as out:  # one entry at a time: the bench holds none of them
            for i in range(ENTRIES):
                out.write(json.dumps(entry(rng, i, turns=rng.randint(30, 60), words=700)))
                out.write("\n")
        size_mb = source.stat().st_size / 1e6
        before = peak_rss_mb()
        rates = [asyncio.run(one_run(source, Path(tmp) / f"out{i}.jsonl")) for i in range(3)]
        print(f"{ENTRIES} entries ({size_mb:.0f} MB of JSONL): "
              f"{statistics.median(rates):.0f} entries/s (median of 3)")
        print(f"peak resident memory {peak_rss_mb():.0f} MB (before the runs {before:.0f} MB); "
              f"input {size_mb:.0f} MB")


if __name__ == "__main__":
    main()
