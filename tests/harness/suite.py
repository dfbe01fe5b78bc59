"""How the suite is cut and laid out for a parallel run (pytest-xdist, `--dist loadgroup`):
what each test needs is marked from what it uses, the real-model tests share one worker,
and the long tests start first (docs/architecture.md, "Testing").

Marks set here, by what a test uses (never by hand):
- `process`: runs `threadline` as a real process (everything under tests/e2e/);
- `postgres`: needs a PostgreSQL server (asks for one of its fixtures, or the store
  contract's `postgres` backend);
- `browser`: drives Chromium;
- `model` (set by hand on each test that runs the real local model): these run one after
  another on one worker (`xdist_group`), since each keeps both cores busy.
`make check` leaves the first three and the real model out: the inner loop while working.
"""

from __future__ import annotations

from pathlib import Path

import pytest

POSTGRES_FIXTURES = {"postgres_server", "own_postgres", "postgres_url"}
BROWSER_MODULES = {"test_web_browser.py"}
# Modules whose tests are long even with the clock (real processes, real restarts of a
# database): they start first, so the run does not end waiting on one of them.
LONG_FIRST = ("tests/e2e/", "tests/platforms/test_telegram", "tests/platforms/test_discord")


def pytest_configure(config: pytest.Config) -> None:
    for line in ("process: runs `threadline` as a real process (tests/e2e)",
                 "postgres: needs a PostgreSQL server",
                 "browser: drives Chromium"):
        config.addinivalue_line("markers", line)


def _needs_postgres(item: pytest.Item) -> bool:
    names = set(getattr(item, "fixturenames", ()))
    if names & POSTGRES_FIXTURES:
        return True
    callspec = getattr(item, "callspec", None)
    return callspec is not None and callspec.params.get("backend") == "postgres"


def _rank(item: pytest.Item, root: Path) -> int:
    """0 for the real-model tests and the long modules, 1 for the rest: the order the
    workers take them in."""
    if item.get_closest_marker("model"):
        return 0
    path = str(Path(str(item.fspath)).relative_to(root))
    return 0 if path.startswith(LONG_FIRST) else 1


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = Path(str(config.rootpath))
    for item in items:
        path = Path(str(item.fspath))
        if "e2e" in path.parts:
            item.add_marker(pytest.mark.process)
        if _needs_postgres(item):
            item.add_marker(pytest.mark.postgres)
        if path.name in BROWSER_MODULES:
            item.add_marker(pytest.mark.browser)
        if item.get_closest_marker("model"):
            item.add_marker(pytest.mark.xdist_group("model"))
    items.sort(key=lambda item: _rank(item, root))  # stable: each module keeps its order
