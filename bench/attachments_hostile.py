"""What each hostile file (tests/harness/hostile_files.py) costs the attachment readers.

Each file is read as the gateway reads it, three times, each time in a fresh process
(so one file's memory never counts against the next). Prints the median CPU seconds, the
median peak resident memory of that process (MB, interpreter and imports included: the
"baseline" column is the peak before reading) and what the reader made of the file.
A run that takes longer than --timeout seconds is stopped and shown as such.

Run: .venv/bin/python bench/attachments_hostile.py [--timeout S] [NAME ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.harness.hostile_files import CORPUS  # noqa: E402

RUNS = 3


def run_once(name: str, path: Path, timeout: float) -> dict[str, object] | None:
    """One read of the file in a fresh process; None when it ran past `timeout`."""
    try:
        done = subprocess.run([sys.executable, "-m", "tests.harness.hostile_files", name,
                               str(path)], cwd=ROOT, capture_output=True, text=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return None
    if done.returncode != 0:
        return {"outcome": f"crashed: {done.stderr.strip().splitlines()[-1:]}", "cpu_s": 0.0,
                "peak_mb": 0.0, "baseline_mb": 0.0}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("names", nargs="*", default=list(CORPUS), metavar="NAME")
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args()
    print(f"{'file':<20} {'size':>10} {'cpu s':>7} {'peak MB':>8} {'baseline':>8}  outcome")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.names:
            filename, make = CORPUS[name]
            path = Path(tmp) / filename
            path.write_bytes(make())
            runs = [run_once(name, path, args.timeout) for _ in range(RUNS)]
            done = [r for r in runs if r is not None]
            size = f"{path.stat().st_size / 1024:,.0f} KB"
            if len(done) < RUNS:
                print(f"{name:<20} {size:>10} {'>' + str(int(args.timeout)):>7} "
                      f"{'':>8} {'':>8}  stopped after {args.timeout:g} s")
                continue
            cpu = statistics.median(float(r["cpu_s"]) for r in done)
            peak = statistics.median(float(r["peak_mb"]) for r in done)
            base = statistics.median(float(r["baseline_mb"]) for r in done)
            print(f"{name:<20} {size:>10} {cpu:>7.2f} {peak:>8.0f} {base:>8.0f}  "
                  f"{done[0]['outcome']}")


if __name__ == "__main__":
    main()
