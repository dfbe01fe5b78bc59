"""A server program spoken to over its stdin and stdout, in a process group of its own.

The MCP SDK's stdio client does much the same; this transport also keeps the program's
pid, so stopping it ends the whole process group (helpers the program started included,
even when the program itself exits at once), and it reads the program's stderr into our
log, through the redaction filter, instead of letting it write to ours unfiltered. The
program inherits only what the SDK lets a server inherit (HOME, PATH, USER, ...) plus
its configured `env`: never the gateway's own keys.

Stopping follows the protocol's order: close stdin and let the program exit; then SIGTERM
to its group; then SIGKILL. Every wait is bounded, and the stop runs shielded from
cancellation, so a cancelled caller can neither leave a program running nor hang on one.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager, suppress

import anyio
import mcp_types as types
from anyio.abc import Process
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.client.stdio import get_default_environment
from mcp.shared.message import SessionMessage

log = logging.getLogger(__name__)

GRACE_S = 2.0  # after its stdin closes, the program may exit by itself this long
TERM_S = 2.0  # after SIGTERM to its group, before SIGKILL
POLL_S = 0.02
TAIL_LINES = 3  # its last stderr lines are kept (a traceback's last lines name the error)
MAX_LINE = 64 * 1024 * 1024  # a stdout line longer than this is a broken program
_GONE = (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError)

Incoming = SessionMessage | Exception


class Program:
    """One server program: its pid while it runs, the end of what it said on stderr,
    and whether its stdout has ended (it exited, or closed it)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.pid: int | None = None
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        self.ended = asyncio.Event()
        self.returncode: int | None = None

    def said(self) -> str:
        """Its last stderr lines, for a log line about why it stopped (debug logs have
        every line)."""
        return " | ".join(line.strip()[:200] for line in self.tail)


@asynccontextmanager
async def stdio_transport(command: Sequence[str], env: Mapping[str, str], cwd: str | None,
                          program: Program
                          ) -> AsyncIterator[tuple[MemoryObjectReceiveStream[Incoming],
                                                   MemoryObjectSendStream[SessionMessage]]]:
    """Start the program; yield the streams an MCP session reads and writes."""
    program.ended.clear()
    program.tail.clear()
    program.pid = program.returncode = None  # this run's, once it has started
    process = await anyio.open_process(
        list(command), env={**get_default_environment(), **env}, cwd=cwd,
        start_new_session=True)  # its own session, so its own process group
    program.pid = process.pid
    # No await between the start and the task group: a cancel there would lose the program.
    read_send, read_receive = anyio.create_memory_object_stream[Incoming](0)
    write_send, write_receive = anyio.create_memory_object_stream[SessionMessage](0)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(_read_stdout, process, read_send, program)
        tasks.start_soon(_write_stdin, process, write_receive, read_send)
        tasks.start_soon(_read_stderr, process, program)
        try:
            yield read_receive, write_send
        finally:
            with anyio.CancelScope(shield=True):
                await stop_program(process)
                program.returncode = process.returncode
                for stream in (read_receive, write_send, read_send, write_receive):
                    await stream.aclose()
            tasks.cancel_scope.cancel()


async def _read_stdout(process: Process, send: MemoryObjectSendStream[Incoming],
                       program: Program) -> None:
    """Each line a message for the session; the end of stdout ends the session."""
    assert process.stdout is not None
    pieces: list[bytes] = []
    held = 0
    try:
        async with send:
            async for chunk in process.stdout:
                *lines, rest = chunk.split(b"\n")
                if lines:
                    lines[0] = b"".join([*pieces, lines[0]])
                    pieces, held = [], 0
                for line in lines:
                    if line.strip():
                        await send.send(_message(line, program.name))
                if rest:
                    pieces.append(rest)
                    held += len(rest)
                    if held > MAX_LINE:
                        log.warning("mcp %s: a line on stdout passed %d MB; ending the "
                                    "session", program.name, MAX_LINE // 2**20)
                        return
    except _GONE:
        pass  # the session went first, or the pipe broke: either way this is the end
    finally:
        program.ended.set()


def _message(line: bytes, name: str) -> Incoming:
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:  # what the line said stays out of the log: it may be anything
        log.warning("mcp %s: a line on stdout is not a JSON-RPC message", name)
        return exc


async def _write_stdin(process: Process, receive: MemoryObjectReceiveStream[SessionMessage],
                       read_send: MemoryObjectSendStream[Incoming]) -> None:
    assert process.stdin is not None
    try:
        async with receive:
            async for message in receive:
                data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                await process.stdin.send(data.encode() + b"\n")
    except _GONE:
        # The program may still run: end the read side so no request waits forever.
        await read_send.aclose()


async def _read_stderr(process: Process, program: Program) -> None:
    """Kept (the last lines) and logged at debug level, a line at a time."""
    assert process.stderr is not None
    buffer = b""
    with suppress(*_GONE):
        async for chunk in process.stderr:
            *lines, buffer = (buffer + chunk).split(b"\n")
            if len(buffer) > 4096:  # a line without an end is cut, not held forever
                lines, buffer = [*lines, buffer], b""
            for line in lines:
                text = line.decode(errors="replace").rstrip()[:500]
                if text:
                    program.tail.append(text)
                    log.debug("mcp %s: %s", program.name, text)


async def stop_program(process: Process) -> None:
    """Close stdin, give the program GRACE_S to exit, then SIGTERM and SIGKILL its group;
    then SIGKILL whatever it left in that group."""
    assert process.stdin is not None
    with suppress(*_GONE):
        await process.stdin.aclose()
    if not await _exited(process, GRACE_S):
        _signal_group(process.pid, signal.SIGTERM)
        if not await _exited(process, TERM_S):
            _signal_group(process.pid, signal.SIGKILL)
            await _exited(process, TERM_S)
    await end_group(process.pid)
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            with suppress(*_GONE):
                await stream.aclose()


async def end_group(pgid: int) -> None:
    """Helpers left in the process group: SIGTERM, a moment, then SIGKILL."""
    if not _signal_group(pgid, signal.SIGTERM):
        return
    deadline = anyio.current_time() + TERM_S
    # Polled: processes that are not our children tell us nothing when they exit.
    while _living(pgid) and anyio.current_time() < deadline:  # noqa: ASYNC110
        await anyio.sleep(POLL_S)
    _signal_group(pgid, signal.SIGKILL)


def _living(pgid: int) -> bool:
    """Whether a process of the group still runs. A dead helper stays a zombie until
    init reaps it (which in a container may be never): that is not a running one."""
    if not _signal_group(pgid, 0):
        return False
    try:
        entries = [e for e in os.scandir("/proc") if e.name.isdigit()]
    except OSError:
        return True  # no /proc to ask: the signal's word stands
    for entry in entries:
        try:
            with open(f"{entry.path}/stat", "rb") as stat:
                fields = stat.read().rpartition(b")")[2].split()
        except OSError:
            continue  # gone meanwhile
        if int(fields[2]) == pgid and fields[0] != b"Z":
            return True
    return False


def _signal_group(pgid: int, sig: int) -> bool:
    """Whether the group still had a process to signal."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


async def _exited(process: Process, within: float) -> bool:
    # Polled: process.wait() would also wait for pipes a helper may still hold open.
    deadline = anyio.current_time() + within
    while process.returncode is None:
        if anyio.current_time() >= deadline:
            return False
        await anyio.sleep(POLL_S)
    return True


def describe_exit(program: Program) -> str:
    """How the program ended, in words (its exit code or signal, and its last words)."""
    code = program.returncode
    how = ("it ended" if code is None else f"it exited with code {code}" if code >= 0
           else f"it was killed by {_signal_name(-code)}")
    said = program.said()
    return f"{how}; it said: {said}" if said else how


def _signal_name(number: int) -> str:
    with suppress(ValueError):
        return signal.Signals(number).name
    return f"signal {number}"

