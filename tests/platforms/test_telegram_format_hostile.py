"""Telegram formatting never stalls the bot and never loses text: the shapes that made the
Markdown converter's spoiler pattern exponential render at once (they never reach it), and
a formatter that runs over its budget yields the reply as plain text (docs/architecture.md,
"Untrusted work")."""

from __future__ import annotations

import time

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.delivery.rendering import Renderer
from platforms.base import ChatRef, Chunk, PlatformAdapter
from platforms.telegram.format import render
from tests.harness import jobs
from tests.harness.cpu import cpu_seconds

CPU_BOUND_S = 0.5  # a 100-level shape once took longer than the age of the universe


def nested(depth: int, marker: str = "> ", head: str = "x", tail: str = "x") -> str:
    return f"||{head}\n" + marker * depth + f"\n{tail}||"


def timed_render(text: str) -> tuple[list[Chunk], float]:
    return cpu_seconds(lambda: render(text))


def test_the_reported_shape_renders_at_once_with_its_words() -> None:
    for depth in (16, 32, 64, 256):
        chunks, spent = timed_render(nested(depth))
        assert spent < CPU_BOUND_S, (depth, spent)
        assert "".join(c.text for c in chunks).count("x") == 2
        assert "||" in chunks[0].text  # not a spoiler: its pipes stay


@settings(max_examples=60, deadline=None)
@given(depth=st.integers(1, 80),
       marker=st.sampled_from(["> ", " > ", ">  ", "> \t", ">", "\n> ", "  > "]),
       head=st.sampled_from(["", "x", " ", "x ", "\n"]),
       tail=st.sampled_from(["", "x", "\nx", " x", " ", "\n\n"]))
def test_generated_nested_quote_spoilers_render_within_the_bound(depth, marker, head, tail):
    chunks, spent = timed_render(nested(depth, marker, head, tail))
    assert spent < CPU_BOUND_S
    assert all(c.text.strip() for c in chunks)


class _SlowFormatting(PlatformAdapter):
    name = "slow"

    @property
    def formatter(self):
        return jobs.render_slowly

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def send(self, chat, chunk, reply_to=None):
        return None


async def test_a_formatter_over_its_budget_gives_plain_text_and_the_next_reply_renders():
    adapter = _SlowFormatting(handler=None)  # type: ignore[arg-type]
    renderer = Renderer({"slow": adapter}, budget_s=0.5)
    chat = ChatRef("slow", "1")
    try:
        started = time.monotonic()
        chunks = await renderer.render(chat, "**every** word <kept>")
        assert time.monotonic() - started < 30
        assert chunks == [Chunk("**every** word <kept>")]  # the reply as written
        assert renderer.fallbacks == 1 and renderer.pool.outcomes["over_budget"] == 1
        adapter_ok = type("Fine", (_SlowFormatting,), {"formatter": property(lambda s: render)})
        renderer.adapters = {"slow": adapter_ok(handler=None)}  # type: ignore[arg-type]
        [chunk] = await renderer.render(chat, "**bold** again")
        assert chunk.text == "bold again" and chunk.entities  # a new worker formats it
    finally:
        await renderer.aclose()
