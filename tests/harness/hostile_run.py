"""Sending hostile input through a real `threadline run` on the fake Telegram while another
chat keeps talking: the driver shared by tests/e2e/test_hostile.py and bench/hostile.py."""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.harness.base import last_user_text
from tests.harness.fake_telegram import FakeTelegram
from tests.harness.gateway import write_config

HOSTILE_USER = 5550301  # sends the hostile items, in a private chat of its own
CALM_USER = 5550302  # says hello every second meanwhile
BUDGET_S = 5.0  # attachments.read_timeout_s for these runs


def responder(body: dict[str, Any]) -> str:
    """Echoes short messages whole (so hostile Markdown is rendered back) and sums up long
    ones, so a 100,000-character document is not echoed as 25 Telegram messages."""
    text = last_user_text(body.get("messages") or [])
    return f"echo: {text}" if len(text) <= 300 else f"read {len(text):,} characters"


def config_file(tmp_path: Path, fake: FakeTelegram, model_url: str) -> str:
    platforms = {"console": {"enabled": False},
                 "telegram": {"enabled": True, "token": fake.token, "base_url": fake.base_url,
                              "base_file_url": fake.base_file_url}}
    # A 40K window: a long document is over the point where the transcript is redacted as
    # it grows, so redaction reads every hostile text too.
    model = {"base_url": model_url, "context_length": 40_000, "max_output_tokens": 1024}
    return str(write_config(tmp_path, model=model, platforms=platforms,
                            attachments={"read_timeout_s": BUDGET_S}))


@dataclass
class Calm:
    """The other chat: a hello every second, each answer's delay recorded."""

    fake: FakeTelegram
    latencies: list[float] = field(default_factory=list)
    late: list[tuple[int, float]] = field(default_factory=list)  # (hello number, delay)
    _task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._talk())

    async def stop(self) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)

    def since(self, index: int) -> list[float]:
        return self.latencies[index:]

    async def _talk(self) -> None:
        n = 0
        while True:
            n += 1
            sent = time.monotonic()
            self.fake.push(self.fake.updates.private_text(f"hello {n}", CALM_USER))
            try:
                replies = await self.fake.wait_for_messages(CALM_USER, n, timeout=60)
                delay = replies[n - 1].at - sent
            except TimeoutError:
                delay = 60.0
            self.latencies.append(delay)
            if delay > 2.0:
                self.late.append((n, delay))
            await asyncio.sleep(max(0.0, sent + 1.0 - time.monotonic()))


@dataclass(frozen=True)
class Outcome:
    name: str
    answer: str  # the hostile chat's first answer (or "" when none came)
    seconds: float  # from sending to that answer
    next_answered: bool  # the hostile chat's next message was answered


async def send_item(fake: FakeTelegram, name: str, update: dict[str, Any],
                    timeout_s: float, user: int = HOSTILE_USER) -> Outcome:
    """One hostile item into a hostile chat (the update must be from `user`, in private);
    its answer, then an ordinary next message."""
    before = len(fake.messages(user))
    sent = time.monotonic()
    fake.push(update)
    try:
        replies = await fake.wait_for_messages(user, before + 1, timeout=timeout_s)
        answer, seconds = replies[before].text, replies[before].at - sent
    except TimeoutError:
        answer, seconds = "", timeout_s
    fake.push(fake.updates.private_text(f"after {name}", user))
    next_answered = await said(fake, user, f"echo: after {name}", timeout_s=30)
    return Outcome(name, answer, seconds, next_answered)


async def said(fake: FakeTelegram, chat_id: int, text: str, *, timeout_s: float) -> bool:
    """Whether the chat gets a message reading exactly `text` within the time."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    count = 0
    while True:
        messages = fake.messages(chat_id)
        if any(m.text == text for m in messages[count:]):
            return True
        count = len(messages)
        try:
            await fake.wait_for_messages(chat_id, count + 1,
                                         timeout=max(0.01, deadline - loop.time()))
        except TimeoutError:
            return any(m.text == text for m in fake.messages(chat_id)[count:])


def file_update(fake: FakeTelegram, file_name: str, data: bytes,
                user: int = HOSTILE_USER) -> dict[str, Any]:
    """The file sent "as a file" (a document), the way it reaches the bot unchanged."""
    suffix = "." + file_name.rpartition(".")[2]
    file_id = fake.add_file(data, suffix=suffix)
    return fake.updates.document(file_name, None, chat_id=user, user_id=user, file_id=file_id)


def percentile(values: list[float], share: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def p50(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0
