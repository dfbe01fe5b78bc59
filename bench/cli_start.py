"""How long the `threadline` command takes to start: `--help`, and `sessions list` on a
small real database (issue 37, point 10).

    python bench/cli_start.py [--runs 9]

Runs each command `--runs` times, each in a fresh process with THREADLINE_HOME in a temp
directory, and prints the median wall time beside its goal, then the median CPU time (a
steadier figure on a busy machine). The children write their
bytecode cache into that directory (PYTHONPYCACHEPREFIX) and one untimed run warms it, so
the numbers are those of an installed copy even when PYTHONDONTWRITEBYTECODE is set here.
To time an older release, run this file with that release's checkout first on `sys.path`
(`PYTHONPATH=/path/to/old python bench/cli_start.py`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))  # after PYTHONPATH: see above

from storage.models import NewMessage  # noqa: E402
from storage.sqlite.store import SqliteSessionStore  # noqa: E402

DB_FILENAME = "threadline.db"  # gateway.config's name, not imported: that is what is timed
COMMANDS = (("--help", ["--help"], 0.30), ("sessions list", ["sessions", "list"], 0.50))
CHATS = 20


async def make_database(path: Path) -> None:
    """A few chats with a short conversation each, written by the real store."""
    store = SqliteSessionStore(path)
    await store.initialize()
    try:
        for chat in range(CHATS):
            session = await store.create_root_session(f"console:bench{chat}", model="m",
                                                      system_prompt="s")
            await store.append_messages(session.id, [
                NewMessage({"role": "user", "content": f"question {chat}"}, tokens=5),
                NewMessage({"role": "assistant", "content": f"answer {chat}"}, tokens=5),
            ])
    finally:
        await store.shutdown()


def cpu_seconds() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def run_seconds(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """Wall and CPU time of one `python -m gateway.cli ARGV`, to its exit; a failure stops
    the bench. The CPU time hardly moves when other work shares the machine."""
    started, cpu = time.perf_counter(), cpu_seconds()
    subprocess.run([sys.executable, "-m", "gateway.cli", *argv], env=env, cwd=cwd,
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started, cpu_seconds() - cpu


def main(runs: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        home.mkdir(mode=0o700)
        asyncio.run(make_database(home / DB_FILENAME))
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        path = [p for p in (os.environ.get("PYTHONPATH"), str(ROOT)) if p]
        env.update(THREADLINE_HOME=str(home), PYTHONPYCACHEPREFIX=str(Path(tmp) / "pycache"),
                   PYTHONPATH=os.pathsep.join(path))
        for name, argv, goal in COMMANDS:
            run_seconds(argv, env, home)  # warms the bytecode cache
            wall, cpu = zip(*(run_seconds(argv, env, home) for _ in range(runs)), strict=True)
            median = statistics.median(wall)
            print(f"{name} median {median:.2f} s (goal {goal:.2f} s, ratio {median / goal:.2f}; "
                  f"cpu {statistics.median(cpu):.2f} s)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    main(parser.parse_args().runs)
