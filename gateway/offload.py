"""Work on what strangers send, in worker processes that can be killed.

Reading a PDF, decoding a picture or converting a reply's Markdown is CPU work on input
nobody vetted. On the event loop it would stall every chat; in a thread it could neither
be stopped (a runaway regex or PDF parser holds the GIL and ignores cancellation) nor be
kept from taking the host's memory. So each kind of such work has a small pool of its
own worker processes: a job gets a time budget, a worker gets a memory cap, and a job
that runs over its budget, is cancelled (/stop, shutdown) or kills its worker costs only
that worker, which is replaced. See docs/architecture.md, "Untrusted work".
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

_PR_SET_PDEATHSIG = 1
WORKER_NICENESS = 5
# Where `gateway` is importable from, for a worker started from any directory.
_ROOT = str(Path(__file__).resolve().parent.parent)


class WorkFailed(Exception):
    """A job did not finish: over its budget, or its worker died (crash, memory cap)."""


class WorkTimeout(WorkFailed):
    """The job ran past its time budget; its worker was killed."""


class Worker:
    """One worker process (a fresh interpreter, `python -c`) and the socket to it.

    Not multiprocessing's spawn, which re-runs the parent's main script in the child: a
    worker must not depend on how the gateway was started.
    """

    def __init__(self, name: str, memory_bytes: int | None, preload: Sequence[str]) -> None:
        ours, theirs = socket.socketpair()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (_ROOT, os.environ.get("PYTHONPATH")) if p)}
        code = (f"from gateway.offload import serve; serve({theirs.fileno()}, "
                f"{memory_bytes!r}, {tuple(preload)!r})")
        self.process = subprocess.Popen(
            [sys.executable, "-c", code, name], pass_fds=(theirs.fileno(),), env=env,
            stdin=subprocess.DEVNULL, start_new_session=True)  # a terminal's ^C is not theirs
        theirs.close()
        self.conn: Connection = Connection(ours.detach())

    def alive(self) -> bool:
        return self.process.poll() is None

    def call(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[bool, Any]:
        """Send one job and wait for its answer (in a thread of the pool's own)."""
        self.conn.send((fn, args))
        return self.conn.recv()

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self.process.kill()
        with contextlib.suppress(OSError):
            self.conn.close()

    def reap(self) -> None:
        """Collect the dead process (a blocking wait of a few milliseconds at most)."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5.0)


class WorkerPool:
    """`size` worker processes for one kind of work; `run` gives a job to an idle one.

    Workers start when first needed and stay; a worker that ran over its budget, was
    cancelled or died is killed and replaced by a new one on the next job. Nothing here
    blocks the event loop: the pipe's blocking calls run in threads of the pool's own,
    never the loop's default executor, which other work shares.
    """

    def __init__(self, name: str, *, size: int = 2, memory_mb: int | None = None,
                 preload: Sequence[str] = ()) -> None:
        self.name = name
        self.size = max(1, size)
        self._memory = memory_mb * 1024 * 1024 if memory_mb else None
        self._preload = tuple(preload)
        self._threads = ThreadPoolExecutor(self.size, thread_name_prefix=f"pool-{name}")
        self._idle: asyncio.Queue[Worker | None] | None = None
        self._busy: set[Worker] = set()
        self._calls: set[asyncio.Future[Any]] = set()  # pipe round trips in flight
        self._closed = False
        self.killed = 0  # workers killed for a budget, a cancel or a crash (for tests/metrics)
        # Jobs by how they ended: done, raised (the job's own error), over_budget, cancelled,
        # worker_died; read by the gateway's metrics at scrape time.
        self.outcomes: collections.Counter[str] = collections.Counter()

    def _slots(self) -> asyncio.Queue[Worker | None]:
        if self._idle is None:  # made on first use, on the loop that uses it
            self._idle = asyncio.Queue()
            for _ in range(self.size):
                self._idle.put_nowait(None)  # a slot with no process yet
        return self._idle

    async def run(self, fn: Callable[..., T], *args: Any, budget_s: float) -> T:
        """`fn(*args)` in a worker process within `budget_s` seconds of starting there.

        Raises what `fn` raised (when it can cross a process boundary), WorkTimeout past
        the budget, WorkFailed when the worker died. Cancelling the caller kills the job.
        """
        if self._closed:
            raise WorkFailed(f"the {self.name} workers are shut down")
        slots = self._slots()
        worker = await slots.get()
        keep: Worker | None = None  # what goes back to the slot: None when it must go
        try:
            if worker is None or not worker.alive():
                worker = await self._start(worker)
            self._busy.add(worker)
            loop = asyncio.get_running_loop()
            call = loop.run_in_executor(self._threads, worker.call, fn, args)
            self._calls.add(call)
            call.add_done_callback(self._calls.discard)
            call.add_done_callback(_consume)
            try:
                ok, value = await asyncio.wait_for(asyncio.shield(call), budget_s)
            except TimeoutError:
                self.outcomes["over_budget"] += 1
                raise WorkTimeout(f"over its {budget_s:g} s budget") from None
            except asyncio.CancelledError:
                self.outcomes["cancelled"] += 1
                raise
            except (EOFError, OSError, pickle.PickleError) as exc:
                self.outcomes["worker_died"] += 1
                if not self._closed:  # closing kills workers on purpose: no status to tell
                    await loop.run_in_executor(self._threads, worker.reap)  # its exit status
                raise WorkFailed(f"the worker stopped ({_exit_of(worker)})") from exc
            keep = worker
            self.outcomes["done" if ok else "raised"] += 1
            if ok:
                return value
            raise value
        finally:
            # A timeout, a cancel or a dead pipe: that worker is killed (which also ends the
            # thread waiting on its pipe) and the slot starts a new one next time.
            if worker is not None:
                self._busy.discard(worker)
                if keep is None:
                    self._discard(worker)
            slots.put_nowait(keep)

    async def _start(self, old: Worker | None) -> Worker:
        if old is not None:
            self._discard(old)
        loop = asyncio.get_running_loop()
        name = f"threadline-{self.name}"
        # Starting an interpreter blocks for a moment: one of our own threads does it.
        return await loop.run_in_executor(self._threads, Worker, name, self._memory,
                                          self._preload)

    def _discard(self, worker: Worker) -> None:
        if worker.alive():
            self.killed += 1
        worker.kill()
        threading.Thread(target=worker.reap, daemon=True).start()

    async def close(self) -> None:
        """Kill every worker at once (running jobs fail); the pool is not used again."""
        self._closed = True
        for worker in list(self._busy):
            self._discard(worker)
        # Killed workers end their round trips at once; wait for them, so nothing that was
        # running is left to fail after the loop is gone.
        await asyncio.gather(*self._calls, return_exceptions=True)
        if self._idle is not None:
            while not self._idle.empty():
                worker = self._idle.get_nowait()
                if worker is not None:
                    worker.kill()
                    worker.reap()
        self._threads.shutdown(wait=False, cancel_futures=True)


def _consume(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()  # a killed worker's broken pipe: expected, not worth a warning


def _exit_of(worker: Worker) -> str:
    code = worker.process.poll()
    if code is None:
        return "no answer"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"


# --- inside the worker process --------------------------------------------------------
def serve(fd: int, memory_bytes: int | None, preload: tuple[str, ...]) -> None:
    """The worker's loop: take a job, answer (True, result) or (False, exception)."""
    conn = Connection(fd)
    _die_with_parent()
    # Below the gateway in the scheduler's eyes: on a busy host the chats' turns come first.
    with contextlib.suppress(OSError):
        os.nice(WORKER_NICENESS)
    if memory_bytes:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    # What a reader library logs about a broken file is not ours to print; the job's
    # result or exception says what matters.
    logging.disable(logging.CRITICAL)
    for module in preload:
        __import__(module)
    while True:
        try:
            fn, args = conn.recv()
        except (EOFError, OSError):
            return  # the gateway is gone
        try:
            answer: tuple[bool, Any] = (True, fn(*args))
        except BaseException as exc:  # noqa: BLE001 - every failure goes back as the answer
            answer = (False, _portable(exc))
        try:
            conn.send(answer)
        except (pickle.PickleError, TypeError, AttributeError) as exc:
            conn.send((False, WorkFailed(f"the result could not be returned: {exc}")))
        except (EOFError, OSError):
            return


def _portable(exc: BaseException) -> BaseException:
    """The exception itself when it survives pickling, else a WorkFailed saying what it was."""
    if isinstance(exc, MemoryError):
        return WorkFailed("it needs more memory than a reader may use")
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:  # noqa: BLE001 - any pickling problem means: describe it instead
        return WorkFailed(f"{type(exc).__name__}: {exc}")
    return exc


def _die_with_parent() -> None:
    """Ask Linux to kill this worker when the gateway dies (even by SIGKILL)."""
    if not os.path.exists("/proc/self"):
        return
    with contextlib.suppress(Exception):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
