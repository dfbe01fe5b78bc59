"""Streamed replies: how soon text shows and how many platform calls a reply costs.

    python bench/streaming.py [--tokens 1000] [--rate 50] [--chats 3]

A fake OpenAI server streams a reply of `--tokens` tokens (4 characters each) at `--rate`
tokens a second, one token per piece, through the real OpenAI SDK, the real gateway, and
the real python-telegram-bot and discord.py against their fakes. Three places are
measured, each with `--chats` conversations at once (the median is printed): a Telegram
private chat (drafts, then one message), a Telegram group (one message edited) and a
Discord DM (one message edited), with the default `streaming.min_interval_ms` of 1,000.
The same runs with streaming off give the baseline: nothing shows until the whole reply.

Printed per place: time to first visible text, time to the final text, and platform calls
per reply (drafts or edits, plus the message itself).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

# bench/ holds a discord.py of its own: take the folder off the path, put the repo on it.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

from platforms.text import split_message, utf16_len  # noqa: E402
from tests.harness.discord_bot import discord_config, discord_gateway  # noqa: E402
from tests.harness.fake_discord import FakeDiscord  # noqa: E402
from tests.harness.fake_openai import FakeOpenAI  # noqa: E402
from tests.harness.fake_telegram import FakeTelegram  # noqa: E402
from tests.harness.telegram_gateway import telegram_config, telegram_gateway  # noqa: E402
from tests.harness.waiting import eventually  # noqa: E402

CHARS_PER_TOKEN = 4
Sample = tuple[float, float, int]  # first visible (s), final (s), platform calls


def model(tokens: int, rate: float) -> tuple[FakeOpenAI, str]:
    reply = " ".join(f"w{i:02d}" for i in range(tokens))[: tokens * CHARS_PER_TOKEN].strip()

    async def answer(body: dict[str, Any]) -> str:
        if not body.get("stream"):  # a whole reply takes as long to write as a streamed one
            await asyncio.sleep(tokens / rate)
        return reply

    fake = FakeOpenAI(responder=answer)
    fake.stream_chunk_chars = CHARS_PER_TOKEN
    fake.stream_delay_s = 1.0 / rate
    return fake, reply


async def telegram_place(llm: FakeOpenAI, reply: str, chats: int, *, group: bool,
                         streaming: bool) -> list[Sample]:
    fake = FakeTelegram()
    await fake.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            config = telegram_config(Path(tmp), fake, llm.base_url,
                                     model={"max_output_tokens": 4000, "timeout_s": 120},
                                     streaming={"enabled": streaming})
            async with telegram_gateway(config):
                async def one(n: int) -> Sample:
                    user = 7_000_000 + n
                    chat = -1_002_000_000_000 - n if group else user
                    update = (fake.updates.group_text("@threadline_bot go", chat, user)
                              if group else fake.updates.private_text("go", user))
                    pushed = time.monotonic()
                    fake.push(update)
                    await eventually(lambda: [m.text for m in fake.messages(chat)] == [reply],
                                     timeout=120, every=0.05)
                    timeline = [c for c in fake.timeline(chat) if c.method != "sendChatAction"]
                    done = fake.messages(chat)[0]
                    final = done.edited_at or done.at
                    return timeline[0].at - pushed, final - pushed, len(timeline)
                return await asyncio.gather(*(one(n) for n in range(chats)))
    finally:
        await fake.stop()


async def discord_place(llm: FakeOpenAI, reply: str, chats: int, *,
                        streaming: bool) -> list[Sample]:
    fake = FakeDiscord()
    await fake.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            config = discord_config(Path(tmp), fake, llm.base_url,
                                    model={"max_output_tokens": 4000, "timeout_s": 120},
                                    streaming={"enabled": streaming})
            expected = split_message(reply, 2000, measure=utf16_len)

            def shown(dm: str) -> list[str]:  # the channel's messages as they stand now
                ids = dict.fromkeys(m.id for m in fake.messages(dm) if m.id in fake.stored)
                return [fake.stored[i]["content"] for i in ids]

            async with discord_gateway(config):
                async def one(n: int) -> Sample:
                    user = str(810_000_000_000_000_000 + n)
                    dm = fake.dm_channel(user)
                    pushed = time.monotonic()
                    await fake.user_message(dm, "go", author_id=user)
                    await eventually(lambda: shown(dm) == expected, timeout=120, every=0.05,
                                     what=lambda: [len(t) for t in shown(dm)])
                    writes = fake.messages(dm)
                    return writes[0].at - pushed, writes[-1].at - pushed, len(writes)
                return await asyncio.gather(*(one(n) for n in range(chats)))
    finally:
        await fake.stop()


def line(name: str, on: list[Sample], off: list[Sample]) -> str:
    first = statistics.median(s[0] for s in on)
    final = statistics.median(s[1] for s in on)
    calls = statistics.median(s[2] for s in on)
    base = statistics.median(s[0] for s in off)
    return (f"{name:<18} first text {first * 1000:8,.0f} ms   final {final:6.2f} s   "
            f"calls/reply {calls:5.1f}   | streaming off: first text {base:6.2f} s "
            f"({first / base:.3f}x)")


async def main(tokens: int, rate: float, chats: int) -> None:
    llm, reply = model(tokens, rate)
    await llm.start()
    print(f"reply: {tokens} tokens ({len(reply):,} characters) at {rate:g} tokens/s, "
          f"{chats} chats at once, streaming.min_interval_ms 1000")
    places: list[tuple[str, Callable[[bool], Awaitable[list[Sample]]]]] = [
        ("telegram private", lambda on: telegram_place(llm, reply, chats, group=False,
                                                       streaming=on)),
        ("telegram group", lambda on: telegram_place(llm, reply, chats, group=True,
                                                     streaming=on)),
        ("discord dm", lambda on: discord_place(llm, reply, chats, streaming=on)),
    ]
    try:
        for name, run in places:
            on, off = await run(True), await run(False)
            print(line(name, on, off), flush=True)
    finally:
        await llm.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--chats", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.tokens, args.rate, args.chats))
