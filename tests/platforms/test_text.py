"""Splitting long replies: every chunk fits, fences stay balanced, nothing lost or doubled."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from platforms.text import split_message, utf16_len
from tests.harness.chunks import fence_lines, rejoin


def test_a_long_code_block_is_closed_and_reopened_with_its_language() -> None:
    text = "Here:\n\n```python\n" + "".join(f"print({i})\n" for i in range(200)) + "```\nDone."
    chunks = split_message(text, 300)
    assert len(chunks) > 3 and all(len(c) <= 300 for c in chunks)
    for chunk in chunks:
        assert fence_lines(chunk) % 2 == 0, chunk
    assert all(c.startswith("```python\n") for c in chunks[1:-1])


def test_paragraphs_are_preferred_over_lines_and_words() -> None:
    first, second = "a" * 60, "b " * 40
    chunks = split_message(f"{first}\n\n{second.strip()}", 100)
    assert chunks[0] == f"{first}\n\n"


def test_emoji_count_twice_where_the_platform_counts_utf16() -> None:
    text = "😀" * 3000  # 6,000 UTF-16 code units
    chunks = split_message(text, 4096, utf16_len)
    assert all(utf16_len(c) <= 4096 for c in chunks)
    assert "".join(chunks) == text


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["word ", "line\n", "\n\n", "```py\n", "```\n", "é", "😀"]),
                max_size=400),
       st.integers(min_value=40, max_value=300))
def test_nothing_is_lost_or_repeated_and_every_chunk_fits(parts: list[str], limit: int) -> None:
    text = "".join(parts)
    chunks = split_message(text, limit, utf16_len)
    assert all(utf16_len(c) <= limit for c in chunks)
    assert all(fence_lines(c) % 2 == 0 for c in chunks[:-1])  # every chunk closes its code
    assert rejoin(chunks) == text
