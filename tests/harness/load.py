"""`pytest --cpu-load N`: N processes that keep a CPU busy for the whole session, as on a
CI machine that runs other jobs. `make test-loaded` runs the tests whose waits are
bounded in time (`-m timing`) this way (docs/architecture.md, "Under load").

Each busy process ends by itself when the session ends or when pytest dies: it watches
its parent and stops when the parent is gone.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

# Spins; every 1M rounds it looks whether pytest (its parent) is still there.
_BUSY = """
import os, sys
parent = int(sys.argv[1])
while True:
    for _ in range(1_000_000):
        pass
    if os.getppid() != parent:
        break
"""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cpu-load", type=int, default=0, metavar="N",
                     help="keep N CPUs busy while the tests run (see tests/harness/load.py)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "timing: waits bounded in time; `make test-loaded` "
                                       "runs these with the CPUs kept busy")


@pytest.fixture(scope="session", autouse=True)
def cpu_load(request: pytest.FixtureRequest) -> Iterator[int]:
    """The busy processes, for the session; the number running."""
    count = int(request.config.getoption("--cpu-load"))
    busy = [subprocess.Popen([sys.executable, "-c", _BUSY, str(os.getpid())])
            for _ in range(count)]
    try:
        yield count
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()
