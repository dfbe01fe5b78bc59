"""A real, throwaway PostgreSQL server for the tests, run from the OS server binaries."""

from __future__ import annotations

import asyncio
import itertools
import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import asyncpg

T = TypeVar("T")

DEBIAN_ROOT = Path("/usr/lib/postgresql")
USER = "threadline"
# The server refuses to run as root; under root we hand everything to this OS account.
OS_ACCOUNT = "postgres"
READY_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0
# Durability costs time and buys nothing for a database thrown away after the run.
SERVER_SETTINGS = {
    "listen_addresses": "127.0.0.1",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
}
NOT_FOUND = ("PostgreSQL server binaries not found; `make test` installs them "
             "(Debian package postgresql)")


def find_binaries() -> tuple[Path, Path]:
    """`(initdb, postgres)`: the newest Debian install first, then whatever PATH offers."""
    versions = []
    for bin_dir in DEBIAN_ROOT.glob("*/bin"):
        version = bin_dir.parent.name
        if (bin_dir / "initdb").is_file() and (bin_dir / "postgres").is_file():
            try:
                key = tuple(int(part) for part in version.split("."))
            except ValueError:
                continue
            versions.append((key, bin_dir))
    if versions:
        newest = max(versions)[1]
        return newest / "initdb", newest / "postgres"
    initdb, postgres = shutil.which("initdb"), shutil.which("postgres")
    if initdb and postgres:
        return Path(initdb), Path(postgres)
    raise RuntimeError(NOT_FOUND)


def free_tcp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def running_as_root() -> bool:
    return os.geteuid() == 0


def server_account() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(OS_ACCOUNT)
    except KeyError:
        raise RuntimeError(f"running as root, but there is no `{OS_ACCOUNT}` OS account to run "
                           "PostgreSQL as (Debian package postgresql creates it)") from None


def run_in_fresh_loop(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` on a new event loop in its own thread.

    Synchronous callers (a session fixture) may sit under a running loop, where
    `asyncio.run` is refused; a separate thread never has one."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


class PostgresServer:
    """One postmaster with its data, socket and log under `base`; `stop()` deletes it all.

    Under root the server runs as the `postgres` account, which needs to reach `base`:
    a directory made by `tempfile.mkdtemp()` in /tmp works, pytest's `tmp_path` does not."""

    def __init__(self, base: Path, **settings: str) -> None:
        self.base = base
        self.settings = {**SERVER_SETTINGS, **settings}
        self.data = base / "data"
        self.sockets = base / "sockets"
        self.log = base / "postgres.log"
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._names = itertools.count(1)

    @property
    def url(self) -> str:
        return self._url("postgres")

    def start(self) -> None:
        """Create the cluster, launch the server and wait until it takes connections."""
        initdb, postgres = find_binaries()
        self.sockets.mkdir(parents=True, exist_ok=True)
        if running_as_root():
            # The account must reach base to create data/ in it; /tmp itself is open to all.
            account = server_account()
            for path in (self.base, self.sockets):
                os.chown(path, account.pw_uid, account.pw_gid)
        self._initdb(initdb)
        self.port = free_tcp_port()
        self._launch(postgres)

    def _launch(self, postgres: Path) -> None:
        command = [str(postgres), "-D", str(self.data), "-p", str(self.port),
                   "-k", str(self.sockets)]
        for name, value in self.settings.items():
            command += ["-c", f"{name}={value}"]
        with self.log.open("ab") as log:
            self._process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                cwd=self.base, **self._account_options())
        self._wait_until_ready(self._process)

    def halt(self) -> None:
        """Stop the server as an outage or a restart does (fast shutdown: connections are
        cut); its data stays, for `resume()`."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def resume(self) -> None:
        """Start the halted server again, on the same port, with the same data."""
        self._launch(find_binaries()[1])

    async def fresh_database(self) -> str:
        """Create a new, empty database and return its URL."""
        name = f"t_{next(self._names)}_{os.getpid()}"
        connection = await asyncpg.connect(self.url)
        try:
            # template0 is pristine by definition: nothing a test adds to template1 leaks in.
            await connection.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
        finally:
            await connection.close()
        return self._url(name)

    def stop(self) -> None:
        """Fast shutdown (SIGINT), SIGKILL after a grace period, then delete `base`."""
        self.halt()
        shutil.rmtree(self.base, ignore_errors=True)

    def _initdb(self, initdb: Path) -> None:
        # --no-sync: the cluster dies with the run, so flushing it to disk is wasted time.
        common = [str(initdb), "-D", str(self.data), "--auth=trust", f"--username={USER}",
                  "--encoding=UTF8", "--no-sync"]
        # C.UTF-8 is missing from some older C libraries; --no-locale always exists.
        failures = []
        for locale in ("--locale=C.UTF-8", "--no-locale"):
            result = subprocess.run(
                [*common, locale], stdin=subprocess.DEVNULL, capture_output=True,
                cwd=self.base, **self._account_options())
            if result.returncode == 0:
                return
            failures.append(f"$ {' '.join([*common, locale])}\n"
                            f"{result.stdout.decode(errors='replace')}"
                            f"{result.stderr.decode(errors='replace')}")
            shutil.rmtree(self.data, ignore_errors=True)
        raise RuntimeError("initdb failed:\n" + "\n".join(failures))

    def _url(self, database: str) -> str:
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{database}"

    def _wait_until_ready(self, process: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        last_error: BaseException | None = None
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"PostgreSQL exited with code {process.returncode}"
                                   f"{self._log_tail()}")
            try:
                run_in_fresh_loop(self._ping())
                return
            except (OSError, TimeoutError, asyncpg.PostgresError,
                    asyncpg.InterfaceError) as error:
                last_error = error
            time.sleep(0.05)
        raise RuntimeError(f"PostgreSQL did not accept connections within {READY_TIMEOUT:.0f} s"
                           f" (last error: {last_error!r}){self._log_tail()}")

    async def _ping(self) -> None:
        connection = await asyncpg.connect(self.url, timeout=2)
        await connection.close()

    def _log_tail(self, lines: int = 30) -> str:
        try:
            tail = self.log.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return ""
        return f"\n--- last lines of {self.log} ---\n" + "\n".join(tail)

    @staticmethod
    def _account_options() -> dict[str, Any]:
        """Popen options that drop root to the server's OS account; empty when not root."""
        if not running_as_root():
            return {}
        account = server_account()
        return {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}
