"""Inline Markdown kept whole across a split, and what counts as saying nothing."""

from __future__ import annotations

import time

import pytest

from platforms.text import INLINE_ROOM, keep_inline, markdown_balanced, split_message, visible


def parts_of(text: str, limit: int = 200) -> list[str]:
    return keep_inline(split_message(text, limit - INLINE_ROOM))


@pytest.mark.parametrize("marker", ["**", "__", "~~", "||", "`", "*", "_"])
def test_a_span_cut_by_the_split_is_closed_and_reopened(marker):
    text = "lead " * 30 + f"{marker}" + "inside " * 30 + f"end{marker} tail"
    parts = parts_of(text)
    assert len(parts) >= 2
    for part in parts:
        assert len(part) <= 200
        assert markdown_balanced(part.replace("||", "")) or marker in ("*", "_")
        assert part.count(marker) % 2 == 0, part
    assert "".join(parts).replace(marker, "") == text.replace(marker, "")


def test_words_that_only_look_like_markers_are_left_alone():
    text = "snake_case_name and 2 * 3 = 6, a_b " * 20
    assert "".join(parts_of(text)) == text


def test_code_fences_are_not_read_for_inline_markers():
    text = "```\n" + "x = a * b  # __init__ **kw\n" * 12 + "```\n" + "done"
    parts = parts_of(text)
    assert all(not p.startswith(("*", "_")) for p in parts)


def test_marker_runs_stay_linear():
    hostile = ("**a " * 10_000) + ("`" * 20_000) + ("_x " * 10_000)  # 90K characters
    parts = split_message(hostile, 2000 - INLINE_ROOM)
    started = time.monotonic()
    keep_inline(parts)
    assert time.monotonic() - started < 5.0  # ~0.2 s; quadratic would be minutes


@pytest.mark.parametrize("text", ["", "   \n\t", "\u200b\u200d\u2060", "\ufeff\u200e ",
                                  "\u3164\u115f", "\u2800\u2800"])
def test_nothing_visible(text):
    assert not visible(text)


@pytest.mark.parametrize("text", ["a", " .", "\u200bhi", "😀", "日本"])
def test_something_visible(text):
    assert visible(text)
