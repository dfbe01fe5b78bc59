"""The console platform: a terminal chat, or one turn per line when stdin is piped."""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import sys
import time
from typing import TextIO

from platforms.base import ChatRef, Chunk, Handler, InboundMessage, PlatformAdapter

log = logging.getLogger(__name__)

PROMPT = "you> "


class ConsoleAdapter(PlatformAdapter):
    """Reads lines from stdin and prints replies to stdout; the local user is an admin."""

    name = "console"
    max_message_length = 1_000_000

    def __init__(self, handler: Handler, chat_id: str = "local", *,
                 stdin: TextIO | None = None, stdout: TextIO | None = None,
                 interactive: bool | None = None, user_id: str = "local") -> None:
        super().__init__(handler)
        self.chat_id = chat_id
        self.user_id = user_id
        self._in = stdin or sys.stdin
        self._out = stdout or sys.stdout
        self.interactive = self._in.isatty() if interactive is None else interactive
        self._reader: asyncio.Task[None] | None = None
        self._closed = asyncio.Event()
        self._waiting: dict[str, asyncio.Event] = {}
        self._seq = 0
        self._shown: dict[str, str] = {}  # chat -> the part of a reply printed while written

    async def start(self) -> None:
        # Bytes that are not valid text must not cost the user their line: a strict
        # decoder would end the chat, and surrogateescape would smuggle lone surrogates
        # into the store and the provider request. U+FFFD keeps the rest of the line.
        if isinstance(self._in, io.TextIOWrapper):
            self._in.reconfigure(errors="replace")
        if self.interactive:
            self._write("Threadline console. Type a message, /help for commands, Ctrl-D to leave.\n")
        self._reader = asyncio.create_task(self._read_loop(), name="console-reader")

    async def stop(self) -> None:
        if self._reader and not self._reader.done():
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        for event in self._waiting.values():
            event.set()
        self._closed.set()

    async def wait_closed(self) -> None:
        await self._closed.wait()

    def stream_mode(self, chat: ChatRef) -> str:
        return "append"

    async def append(self, chat: ChatRef, text: str) -> None:
        """Print what is new in the reply so far. Whitespace at either end waits: the stored
        reply is trimmed, and the final send must find exactly what was printed."""
        visible = text.strip()
        shown = self._shown.get(chat.key)
        if shown is None:
            if not visible:
                return
            self._write("\nthreadline> " if self.interactive else "")
            shown = ""
        if visible.startswith(shown):  # else retracted: the final reply says the rest
            self._write(visible[len(shown):])
            self._shown[chat.key] = visible

    async def send(self, chat: ChatRef, chunk: Chunk, reply_to: str | None = None) -> str | None:
        shown = self._shown.pop(chat.key, None)
        if shown is not None:
            if chunk.text.startswith(shown):  # the rest of the reply printed as it came
                rest = chunk.text[len(shown):].rstrip("\n")
                self._write(rest + (f"\n{PROMPT}" if self.interactive else "\n"))
                return None
            self._write("\n")  # a different text follows (a failure): end the partial line
        if self.interactive:
            self._write(f"\nthreadline> {chunk.text}\n{PROMPT}")
        else:
            self._write(chunk.text.rstrip("\n") + "\n")
        return None

    async def delivered(self, chat: ChatRef, message_ids: tuple[str, ...]) -> None:
        for message_id in message_ids:
            event = self._waiting.get(message_id)
            if event:
                event.set()

    def _write(self, text: str) -> None:
        self._out.write(text)
        self._out.flush()

    def _next_id(self) -> str:
        # Unique across runs so the once-only ledger never mistakes a new line for a replay.
        self._seq += 1
        return f"{time.time_ns()}-{self._seq}"

    async def _read_loop(self) -> None:
        if self.interactive:
            self._write(PROMPT)
        try:
            while True:
                line = await asyncio.to_thread(self._in.readline)
                if line == "":
                    break
                text = line.rstrip("\r\n")
                if not text.strip():
                    if self.interactive:
                        self._write(PROMPT)
                    continue
                await self._submit(text)
        except Exception:  # a broken terminal must end the chat, not the gateway
            log.exception("console input failed")
        finally:
            self._closed.set()

    async def _submit(self, text: str) -> None:
        message = InboundMessage(
            platform=self.name, chat_id=self.chat_id, user_id=self.user_id,
            user_name="you", message_id=self._next_id(), text=text, is_admin_hint=True,
        )
        done = asyncio.Event()
        # Piped input is strictly one line = one turn: wait for the reply before reading on.
        if not self.interactive:
            self._waiting[message.message_id] = done
        await self.handler(message)
        if not self.interactive:
            await done.wait()
            self._waiting.pop(message.message_id, None)
