"""Benchmark `ContextCompressor.compress` and the "would this request fit?" check.

    python bench/compress.py [--sizes 500,1000,...] [--reps N]

Generated tool-heavy transcripts (2,000 messages ≈ 800K characters), an instant summarizer
(a provider that answers at once, so only our code is timed). Reported per size:
  warm    compress() on messages as the live gateway holds them (token counts and redaction
          cached at ingest through the engine's Transcript)
  cold    the same transcript from plain dicts with every cache empty
  fit     one fit check on the live Transcript (engine.fits), and one preflight
  peak    tracemalloc peak while ingesting, and while compressing (warm)
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import random
import statistics
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.compression.compressor import ContextCompressor  # noqa: E402
from agent.context_engine import EngineSettings  # noqa: E402
from agent.providers.base import Completion, Provider, ProviderSettings  # noqa: E402
from agent.usage import CanonicalUsage  # noqa: E402

SIZES = (500, 1_000, 2_000, 4_000, 8_000, 16_000)
WINDOW = 200_000
TOOLS = ("read_file", "run_shell", "search", "write_file", "http_get")
WORDS = ("alpha", "bravo", "deploy", "config", "error", "path", "/srv/app/main.py", "value",
         "retry", "timeout", "build", "test", "ok", "failed", "line", "42", "src/util.py")
SUMMARY = "## Active Task\nbench\n\n## Goal\n" + " ".join(["keep the thread going"] * 80)


class InstantProvider(Provider):
    """Answers every summary request at once with a fixed checkpoint."""

    kind = "openai"

    def __init__(self) -> None:
        super().__init__(ProviderSettings(provider="openai", model="instant",
                                          context_length=WINDOW))
        self.calls = 0

    async def complete(self, messages: list[dict[str, Any]], *, tools: Any = None,
                       max_tokens: int | None = None,
                       temperature: float | None = None) -> Completion:
        self.calls += 1
        return Completion({"role": "assistant", "content": SUMMARY},
                          CanonicalUsage(input_tokens=1, output_tokens=1), self.model)


def _text(rng: random.Random, chars: int) -> str:
    out: list[str] = []
    size = 0
    while size < chars:
        word = rng.choice(WORDS)
        out.append(word)
        size += len(word) + 1
    return " ".join(out)


def transcript(n: int, seed: int = 7) -> list[dict[str, Any]]:
    """A system prompt, then agentic turns: ask, tool calls with results, an answer."""
    rng = random.Random(seed)
    msgs: list[dict[str, Any]] = [{"role": "system", "content": _text(rng, 1_500)}]
    turn = 0
    while len(msgs) < n:
        turn += 1
        msgs.append({"role": "user", "content": _text(rng, rng.randint(40, 300))})
        for step in range(rng.randint(1, 3)):
            ids = [f"call_{turn}_{step}_{k}" for k in range(rng.choice((1, 1, 2)))]
            calls = [{"id": i, "type": "function", "function": {
                "name": rng.choice(TOOLS),
                "arguments": json.dumps({"path": f"/srv/app/f{turn}.py",
                                         "body": _text(rng, rng.choice((40, 80, 120, 600)))})}}
                for i in ids]
            msgs.append({"role": "assistant", "content": None, "tool_calls": calls})
            for i in ids:
                size = rng.choice((100, 150, 200, 300, 400, 500, 700, 3_500))
                msgs.append({"role": "tool", "tool_call_id": i, "content": _text(rng, size)})
        msgs.append({"role": "assistant", "content": _text(rng, rng.randint(80, 500))})
    return msgs[:n] if msgs[n - 1]["role"] != "tool" else msgs[:n + 1]


def _chars(msg: dict[str, Any]) -> int:
    """Characters the provider reads: content plus tool-call names and arguments."""
    calls = msg.get("tool_calls") or ()
    return len(msg.get("content") or "") + sum(
        len(c["function"]["name"]) + len(c["function"]["arguments"]) for c in calls)


def engine() -> ContextCompressor:
    provider = InstantProvider()
    return ContextCompressor(EngineSettings(context_length=WINDOW, max_output_tokens=4_096,
                                            main_provider=provider))


def _ms(seconds: float) -> float:
    return seconds * 1_000


Timing = tuple[float, float]  # (wall seconds, process CPU seconds)


async def _timed_compress(eng: ContextCompressor, messages: Any) -> Timing:
    # Collect first, as timeit does: otherwise a full collection of the objects the setup just
    # made lands inside whichever run happens to trigger it. CPU time is reported beside wall
    # time because on a shared machine the wall clock also measures the neighbours.
    gc.collect()
    t0, c0 = time.perf_counter(), time.process_time()
    await eng.compress(messages)
    elapsed = time.perf_counter() - t0, time.process_time() - c0
    assert eng.last_report is not None and eng.last_report.changed, eng.last_report
    return elapsed


async def _compress_times(base: list[dict[str, Any]], reps: int) -> tuple[list[Timing],
                                                                        list[Timing]]:
    warm: list[Timing] = []
    cold: list[Timing] = []
    for _ in range(reps):
        eng = engine()
        live = eng.new_transcript(base)  # ingest: estimate, redact, render, once per message
        warm.append(await _timed_compress(eng, live))
        cold.append(await _timed_compress(engine(), base))  # plain dicts, empty caches
    return warm, cold


def _median(timings: list[Timing], which: int) -> float:
    return _ms(statistics.median(t[which] for t in timings))


def _per_call_us(fn: Any, loops: int = 20_000) -> float:
    gc.collect()
    t0 = time.perf_counter()
    for _ in range(loops):
        fn()
    return (time.perf_counter() - t0) / loops * 1e6


def measure(n: int, reps: int) -> dict[str, Any]:
    base = transcript(n)
    warm, cold = asyncio.run(_compress_times(base, reps))
    eng = engine()
    live = eng.new_transcript(base)
    ingest_peak, compress_peak = _peaks(base)
    return {"n": n, "chars": sum(_chars(m) for m in base),
            "warm_ms": _median(warm, 0), "warm_cpu_ms": _median(warm, 1),
            "warm_min_ms": _ms(min(t[0] for t in warm)),
            "cold_ms": _median(cold, 0), "cold_cpu_ms": _median(cold, 1),
            "fit_us": _per_call_us(lambda: eng.fits(live)),
            "preflight_us": _per_call_us(lambda: eng.should_compress_preflight(live)),
            "ingest_peak_mb": ingest_peak, "compress_peak_mb": compress_peak}


def _peaks(base: list[dict[str, Any]]) -> tuple[float, float]:
    """Peak traced memory (MB) while ingesting, and while compressing warm."""
    eng = engine()
    tracemalloc.start()
    live = eng.new_transcript(base)
    _, ingest = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    before, _ = tracemalloc.get_traced_memory()
    asyncio.run(eng.compress(live))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return ingest / 2**20, (peak - before) / 2**20


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    started = time.perf_counter()
    rows = [measure(n, args.reps) for n in sizes]
    print("compress(): median wall ms, minimum wall ms, median process-CPU ms")
    print(f"{'messages':>8} {'chars':>10} {'warm':>6} {'w-min':>6} {'w-cpu':>6} {'cold':>7} "
          f"{'c-cpu':>7} {'fit µs':>7} {'prefl µs':>8} {'ingest MB':>9} {'compr MB':>8}")
    for r in rows:
        print(f"{r['n']:>8,} {r['chars']:>10,} {r['warm_ms']:>6.2f} {r['warm_min_ms']:>6.2f} "
              f"{r['warm_cpu_ms']:>6.2f} {r['cold_ms']:>7.1f} {r['cold_cpu_ms']:>7.1f} "
              f"{r['fit_us']:>7.2f} {r['preflight_us']:>8.2f} {r['ingest_peak_mb']:>9.1f} "
              f"{r['compress_peak_mb']:>8.1f}")
    print("\ngrowth (time ratio / size ratio, 1.0 = linear):")
    for a, b in zip(rows, rows[1:], strict=False):
        size = b["n"] / a["n"]
        print(f"  {a['n']:>6,} → {b['n']:>6,}: warm {b['warm_ms'] / a['warm_ms'] / size:.2f}, "
              f"cold {b['cold_ms'] / a['cold_ms'] / size:.2f}")
    if len(rows) > 1:
        first, last = rows[0], rows[-1]
        size = last["n"] / first["n"]
        print(f"  overall {first['n']:,} → {last['n']:,} (×{size:g}): "
              f"warm ×{last['warm_ms'] / first['warm_ms']:.1f}, "
              f"cold ×{last['cold_ms'] / first['cold_ms']:.1f}")
    at_2000 = next((r for r in rows if r["n"] == 2_000), None)
    if at_2000:
        print(f"\ntargets at 2,000 messages: compress warm {at_2000['warm_ms']:.2f} ms "
              f"(CPU {at_2000['warm_cpu_ms']:.2f} ms; ≤ 10 ms), cold {at_2000['cold_ms']:.1f} ms, "
              f"fit check {at_2000['fit_us']:.2f} µs (≤ 50 µs)")
    print(f"total runtime {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
