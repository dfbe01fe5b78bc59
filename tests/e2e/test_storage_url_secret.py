"""A PostgreSQL password holding every character a URL reserves never reaches the output of
`run`, `doctor`, `migrate`, `sessions` or `web`, whether the database answers or not; the
doctor fails when it cannot reach it (issue 35, acceptance 5).

The server here checks passwords (scram-sha-256 over TCP), so the success case proves the
percent-encoded password is the one PostgreSQL accepted.
"""

from __future__ import annotations

import asyncio
import re
import signal
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import aiohttp
import asyncpg
import pytest

from storage.sqlite import SqliteSessionStore
from tests.harness.cli import THREADLINE, Ran, cli_env, threadline
from tests.harness.fixtures import free_port
from tests.harness.gateway import write_config
from tests.harness.postgres import PostgresServer, run_in_fresh_loop

PASSWORD = "Zq9xK#Lm3wP?Rt7vN@Bh2jC/Fy6gD%41sW"
ENCODED = quote(PASSWORD, safe="")
# Every form that could leak: raw, encoded, as a client would decode the raw form, and each
# run of letters between two reserved characters (a URL parser cuts the password there).
SECRETS = (PASSWORD, ENCODED, unquote(PASSWORD),
           *(part for part in re.split(r"[#?@/%]", PASSWORD) if len(part) >= 4))
USER = "tl_nasty"
REFUSED_USER = "tl_refused"  # exists, with another password: the login is refused
WEB_TOKEN = "web-token-0123456789"
HBA = ("local all all trust\n"
       "host all threadline 127.0.0.1/32 trust\n"  # the harness's own superuser
       "host all all 127.0.0.1/32 scram-sha-256\n")


async def _sql(url: str, *statements: str) -> None:
    con = await asyncpg.connect(url)
    try:
        for statement in statements:
            await con.execute(statement)
    finally:
        await con.close()


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    """A server of this module's own that checks passwords over TCP."""
    server = PostgresServer(Path(tempfile.mkdtemp(prefix="threadline-pg-")))
    try:
        server.start()
        (server.data / "pg_hba.conf").write_text(HBA)
        literal = PASSWORD.replace("'", "''")
        run_in_fresh_loop(_sql(
            server.url, "SELECT pg_reload_conf()",
            f"CREATE ROLE {USER} LOGIN PASSWORD '{literal}'",
            f"CREATE ROLE {REFUSED_USER} LOGIN PASSWORD 'another-password-entirely'"))
        yield server
    finally:
        server.stop()


@dataclass
class Case:
    """One configuration of the storage URL, written once, for the commands run against it."""

    tmp_path: Path
    url: str
    fake_openai: Any
    fake_telegram: Any
    log_format: str = "text"
    web_port: int = field(default_factory=free_port)

    def __post_init__(self) -> None:
        platforms = {"console": {"enabled": False},
                     "telegram": {"enabled": True, "token": self.fake_telegram.token,
                                  "base_url": self.fake_telegram.base_url,
                                  "base_file_url": self.fake_telegram.base_file_url}}
        self.config = str(write_config(
            self.tmp_path, model={"base_url": self.fake_openai.base_url},
            platforms=platforms, storage={"path": str(self.tmp_path / "state" / "t.db"),
                                          "url": self.url},
            logging={"format": self.log_format, "level": "DEBUG"},
            web={"port": self.web_port, "token": WEB_TOKEN}))

    async def sqlite_source(self) -> Path:
        """A SQLite store with one session, for `migrate --from`."""
        source = self.tmp_path / "old.db"
        async with SqliteSessionStore(source) as store:
            await store.open_session("telegram:5", model="m", system_prompt=None)
        return source


def leaked(ran: Ran) -> list[str]:
    return [secret for secret in SECRETS if secret in ran.out + ran.err]


async def _once(case: Case, *args: str) -> Ran:
    ran = await threadline(*args, "--config", case.config, home=case.tmp_path, timeout=60)
    assert "Traceback" not in ran.err, ran.err
    assert not leaked(ran), (args, leaked(ran), ran.out, ran.err)
    return ran


async def _serving(case: Case, command: str,
                   while_up: Callable[[], Awaitable[None]] | None) -> Ran:
    """`run` or `web` as a service: `while_up` once it serves, then SIGTERM; without
    `while_up` the process is expected to end by itself."""
    proc = await asyncio.create_subprocess_exec(
        THREADLINE, command, "--config", case.config, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        cwd=str(case.tmp_path), env=cli_env(case.tmp_path))
    reading = asyncio.ensure_future(proc.communicate())
    try:
        if while_up is not None:
            await while_up()
            proc.send_signal(signal.SIGTERM)
        out, err = await asyncio.wait_for(reading, 60)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    ran = Ran(proc.returncode, out.decode(), err.decode())
    assert "Traceback" not in ran.err, ran.err
    assert not leaked(ran), (command, leaked(ran), ran.out, ran.err)
    return ran


@pytest.fixture
async def database(server: PostgresServer) -> AsyncIterator[str]:
    """A new database owned by USER: its name."""
    url = await server.fresh_database()
    name = url.rsplit("/", 1)[1]
    await _sql(server.url, f'ALTER DATABASE "{name}" OWNER TO {USER}')
    yield name


def _url(server: PostgresServer, database: str, *, password: str = ENCODED,
         user: str = USER, port: int | None = None) -> str:
    return f"postgresql://{user}:{password}@127.0.0.1:{port or server.port}/{database}"


async def test_every_command_works_and_keeps_the_password_out(
        tmp_path, server, database, fake_openai, fake_telegram) -> None:
    case = Case(tmp_path, _url(server, database), fake_openai, fake_telegram)
    source = await case.sqlite_source()
    migrated = await _once(case, "migrate", "--from", f"sqlite:{source}")
    assert migrated.code == 0 and f"{USER}:***@127.0.0.1" in migrated.out, migrated.err
    listed = await _once(case, "sessions", "list")
    assert listed.code == 0 and "telegram:5" in listed.out, listed.err
    doctor = await _once(case, "doctor")
    assert doctor.code == 0 and doctor.out.strip().endswith("all good"), doctor.out
    assert f"{USER}:***@127.0.0.1:{server.port}/{database}: schema v" in doctor.out

    async def answer_one() -> None:
        fake_telegram.push(fake_telegram.updates.private_text("hello", 5550001))
        await fake_telegram.wait_for_messages(5550001, 1, timeout=60)

    ran = await _serving(case, "run", answer_one)
    assert ran.code == 0, ran.err

    async def browse() -> None:
        async with aiohttp.ClientSession() as http:
            for _ in range(300):
                try:
                    async with http.get(f"http://127.0.0.1:{case.web_port}/api/chats",
                                        headers={"Authorization": f"Bearer {WEB_TOKEN}"}
                                        ) as listed:
                        assert listed.status == 200
                        assert "telegram:5550001" in await listed.text()
                        return
                except aiohttp.ClientConnectionError:
                    await asyncio.sleep(0.1)
        raise AssertionError("the web view never answered")

    web = await _serving(case, "web", browse)
    assert web.code == 0, web.err


FAILURES = {
    "unreachable": lambda s, db: _url(s, db, port=free_port()),
    "refused": lambda s, db: _url(s, db, user=REFUSED_USER),
    "raw": lambda s, db: _url(s, db, password=PASSWORD),
    "raw-unreachable": lambda s, db: _url(s, db, password=PASSWORD, port=free_port()),
}


@pytest.mark.parametrize("log_format", ["text", "json"])
@pytest.mark.parametrize("failure", list(FAILURES))
async def test_every_command_fails_in_one_line_without_the_password(
        tmp_path, server, database, fake_openai, fake_telegram, failure, log_format) -> None:
    case = Case(tmp_path, FAILURES[failure](server, database), fake_openai, fake_telegram,
                log_format)
    source = await case.sqlite_source()
    doctor, migrated, listed, ran, web = await asyncio.gather(
        _once(case, "doctor"), _once(case, "migrate", "--from", f"sqlite:{source}"),
        _once(case, "sessions", "list"), _serving(case, "run", None),
        _serving(case, "web", None))
    assert doctor.code == 1, doctor.out
    [line] = [line for line in doctor.out.splitlines() if line.startswith("FAIL  database")]
    assert "***@127.0.0.1" in line, line
    for failed in (migrated, listed, ran, web):
        assert failed.code == 1, failed
        assert "***@127.0.0.1" in failed.err, failed.err
