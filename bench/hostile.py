"""Hostile input against a real `threadline run` on the fake Telegram, another chat talking.

    python bench/hostile.py [--items NAME,NAME...] [--calm-s 20]

For each item of the hostile corpus (tests/harness/hostile_files.py, the redaction shapes
of tests/harness/hostile_text.py at 100,000 characters, nested-quote spoiler texts) it
prints the time until the hostile chat got its answer or refusal, the other chat's p50 and
p99 answer delay while the item was handled, and the peak resident memory of the bot and
its worker processes. The target is the other chat's p99 during each item within 2x its
p99 with no hostile traffic: the baseline is the other chat alone in the few seconds just
before the item (the fakes and the conversation's length make it drift over a long run,
which no item is to blame for), and the overall baseline is printed first.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.harness.cli import THREADLINE, cli_env  # noqa: E402
from tests.harness.fake_openai import FakeOpenAI  # noqa: E402
from tests.harness.fake_telegram import FakeTelegram  # noqa: E402
from tests.harness.hostile_files import CORPUS  # noqa: E402
from tests.harness.hostile_run import (  # noqa: E402
    HOSTILE_USER,
    Calm,
    config_file,
    file_update,
    p50,
    percentile,
    responder,
    send_item,
)
from tests.harness.hostile_text import SHAPES  # noqa: E402
from tests.harness.procmem import PeakMemory  # noqa: E402

TEXT_CHARS = 100_000
QUIET_S = 5.0  # the other chat alone before each item: that item's baseline


def items(fake: FakeTelegram) -> list[tuple[str, object]]:
    found: list[tuple[str, object]] = [
        (name, lambda f=file_name, m=make: file_update(fake, f, m()))
        for name, (file_name, make) in CORPUS.items()]
    found += [(f"text:{name}", lambda n=name, m=make: file_update(
        fake, f"{n}.txt", m(TEXT_CHARS).encode())) for name, make in SHAPES.items()]
    found += [(f"spoiler depth {d}", lambda d=d: fake.updates.private_text(
        "||x\n" + "> " * d + "\nx||", HOSTILE_USER)) for d in (16, 32, 64)]
    return found


async def main(chosen: set[str], calm_s: float) -> None:
    model, fake = FakeOpenAI(), FakeTelegram()
    await model.start()
    await fake.start()
    model.responder = responder
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        proc = await asyncio.create_subprocess_exec(
            THREADLINE, "run", "--config", config_file(home, fake, model.base_url),
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL, cwd=tmp, env=cli_env(home))
        calm = Calm(fake)
        try:
            fake.push(fake.updates.private_text("warm up", HOSTILE_USER))
            await fake.wait_for_messages(HOSTILE_USER, 1, timeout=60)
            calm.start()
            await asyncio.sleep(calm_s)
            base = list(calm.latencies)
            print(f"baseline (other chat alone, {len(base)} hellos): "
                  f"p50 {p50(base) * 1000:.0f} ms, p99 {percentile(base, 0.99) * 1000:.0f} ms")
            print(f"{'item':<34}{'answer s':>9}{'other p50':>11}{'other p99':>11}"
                  f"{'ratio':>7}{'peak MB':>9}  first words of the answer")
            for name, make in items(fake):
                if chosen and name not in chosen:
                    continue
                quiet = len(calm.latencies)
                await asyncio.sleep(QUIET_S)
                local = calm.since(quiet) or base
                start = len(calm.latencies)
                async with PeakMemory(proc.pid) as memory:
                    outcome = await send_item(fake, name, make(), 60)
                during = calm.since(start) or [0.0]
                p99 = percentile(during, 0.99)
                ratio = p99 / max(percentile(local, 0.99), 1e-3)
                print(f"{name:<34}{outcome.seconds:>9.2f}{p50(during) * 1000:>9.0f}ms"
                      f"{p99 * 1000:>9.0f}ms{ratio:>7.2f}{memory.peak_mb:>9.0f}  "
                      f"{outcome.answer[:48]!r}", flush=True)
            await calm.stop()
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 60)
            except TimeoutError:
                proc.kill()  # a stuck bot must not outlive the bench
                await proc.wait()
            await fake.stop()
            await model.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", default="", help="comma-separated item names (default all)")
    parser.add_argument("--calm-s", type=float, default=20.0,
                        help="seconds of the other chat alone, for the baseline")
    args = parser.parse_args()
    asyncio.run(main({n for n in args.items.split(",") if n}, args.calm_s))
