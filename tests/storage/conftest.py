"""The store contract runs on both backends: a test asking for `store` (or `backend`) runs
once on SQLite and once on a real PostgreSQL (tests/harness/postgres.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from storage.base import SessionStore
from tests.harness.store import Backend


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    server = request.getfixturevalue("postgres_server") if request.param == "postgres" else None
    return Backend(request.param, tmp_path, server)


@pytest.fixture
async def store(backend: Backend) -> AsyncIterator[SessionStore]:
    await backend.prepare()
    async with backend.store() as opened:
        yield opened
