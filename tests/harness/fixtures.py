"""Pytest fixtures that start the fakes and always stop them (`pytest_plugins` in conftest)."""

from __future__ import annotations

import logging
import socket
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.harness.fake_anthropic import FakeAnthropic
from tests.harness.fake_discord import FakeDiscord, patched_endpoints
from tests.harness.fake_openai import FakeOpenAI
from tests.harness.fake_telegram import FakeTelegram
from tests.harness.postgres import PostgresServer

T = TypeVar("T")


def free_port() -> int:
    """A TCP port on 127.0.0.1 with nothing listening (for connection-refused tests)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
async def fake_openai() -> AsyncIterator[FakeOpenAI]:
    server = FakeOpenAI()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def fake_telegram() -> AsyncIterator[FakeTelegram]:
    server = FakeTelegram()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def fake_discord() -> AsyncIterator[FakeDiscord]:
    server = FakeDiscord()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
def discord_endpoints(fake_discord: FakeDiscord) -> Iterator[FakeDiscord]:
    """The running fake, with discord.py's REST base and gateway pointed at it."""
    with patched_endpoints(fake_discord):
        yield fake_discord


@pytest.fixture
async def fake_anthropic() -> AsyncIterator[FakeAnthropic]:
    server = FakeAnthropic()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One real PostgreSQL server for the whole session; missing binaries fail, never skip.

    Synchronous on purpose: event loops are per test, and this outlives all of them."""
    server = PostgresServer(Path(tempfile.mkdtemp(prefix="threadline-pg-")))
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
def own_postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL server of the test's own, durable (fsync on), to halt and resume as
    outages and restarts do, without touching the session's shared server."""
    server = PostgresServer(Path(tempfile.mkdtemp(prefix="threadline-pg-")), fsync="on",
                            synchronous_commit="on", full_page_writes="on")
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
async def postgres_url(postgres_server: PostgresServer) -> str:
    """The URL of a new, empty database of its own on the session's server."""
    return await postgres_server.fresh_database()


@pytest.fixture
async def autoclose() -> AsyncIterator[Callable[[T], T]]:
    """`autoclose(obj)` returns obj and awaits `obj.aclose()` at teardown, on the test's loop.

    SDK clients left for the garbage collector try to close after the loop is gone.
    """
    kept: list[Any] = []

    def keep(obj: T) -> T:
        kept.append(obj)
        return obj

    yield keep
    for obj in reversed(kept):
        await obj.aclose()


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """configure_logging rewires the root logger and quietens some libraries: undo both."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    levels = {name: logger.level for name, logger in _loggers()}
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)
    for name, logger in _loggers():
        logger.setLevel(levels.get(name, logging.NOTSET))


def _loggers() -> list[tuple[str, logging.Logger]]:
    return [(name, logger) for name, logger in logging.root.manager.loggerDict.items()
            if isinstance(logger, logging.Logger)]
