"""Markdown replies become Telegram messages that fit, keep their formatting, and lose nothing."""

from __future__ import annotations

import logging
import re
from typing import Any

import pytest
import telegramify_markdown
from hypothesis import given, settings
from hypothesis import strategies as st
from telegramify_markdown import RenderConfig

from platforms.base import Chunk
from platforms.telegram.format import TELEGRAM_LIMIT, plain, render
from platforms.text import utf16_len

# Every entity type the Bot API documents for MessageEntity.
BOT_API_TYPES = {
    "mention", "hashtag", "cashtag", "bot_command", "url", "email", "phone_number",
    "bold", "italic", "underline", "strikethrough", "spoiler", "blockquote",
    "expandable_blockquote", "code", "pre", "text_link", "text_mention", "custom_emoji",
    "date_time",
}  # fmt: skip


def converted(markdown: str) -> tuple[str, list[dict[str, Any]]]:
    """What the library makes of the whole reply, before any splitting."""
    text, entities = telegramify_markdown.convert(markdown, config=RenderConfig.isolated())
    return text, [entity.to_dict() for entity in entities]


def assert_sendable(chunks: list[Chunk], limit: int) -> None:
    """Telegram would take every chunk: it fits, is not blank, and its entities are valid."""
    for chunk in chunks:
        size = utf16_len(chunk.text)
        assert size <= limit and chunk.text.strip(), chunk
        for entity in chunk.entities:
            assert entity["type"] in BOT_API_TYPES, entity
            assert entity["offset"] >= 0 and entity["length"] > 0, entity
            assert entity["offset"] + entity["length"] <= size, (entity, chunk.text)
            if entity["type"] == "text_link":
                assert entity["url"], entity


def formatting(parts: list[tuple[int, dict[str, Any]]]) -> set[tuple[Any, ...]]:
    """Which formatting (kind, url, language) covers which UTF-16 position of the reply."""
    return {
        (entity["type"], entity.get("url"), entity.get("language"), position)
        for base, entity in parts
        for position in range(base + entity["offset"], base + entity["offset"] + entity["length"])
    }


def assert_same_as_converted(markdown: str, chunks: list[Chunk]) -> None:
    """The chunks hold exactly the converted text, formatted exactly as before the cuts."""
    text, entities = converted(markdown)
    assert "".join(chunk.text for chunk in chunks) == text
    placed, base = [], 0
    for chunk in chunks:
        placed += [(base, entity) for entity in chunk.entities]
        base += utf16_len(chunk.text)
    assert formatting(placed) == formatting([(0, entity) for entity in entities])


def long_reply() -> str:
    prose = (
        "**Summary** of the _migration_ plan 🚀: see [the runbook](https://example.com/run) "
        "and run `make migrate` first. 数据库迁移需要两个步骤，请先备份。 😀\n\n"
    )
    code = "".join(f"rows = fetch({i})  # 第{i}批 ✅😀\n" for i in range(160))
    return prose * 24 + "```python\n" + code + "```\n\n" + prose * 14


def test_a_long_reply_fits_telegram_and_keeps_its_formatting() -> None:
    markdown = long_reply()
    assert 9_000 <= len(markdown) <= 11_000
    chunks = render(markdown)
    assert len(chunks) >= 3
    assert_sendable(chunks, TELEGRAM_LIMIT)
    assert_same_as_converted(markdown, chunks)


def test_a_code_block_longer_than_a_message_continues_in_its_language() -> None:
    chunks = render(long_reply())
    pre = [(i, e) for i, chunk in enumerate(chunks) for e in chunk.entities if e["type"] == "pre"]
    assert len(pre) >= 2, "the code block should cross a cut"
    assert all(entity.get("language") == "python" for _, entity in pre)
    for (i, before), (j, after) in zip(pre, pre[1:], strict=False):
        assert j == i + 1
        assert before["offset"] + before["length"] == utf16_len(chunks[i].text)
        assert after["offset"] == 0


words = st.sampled_from(["plain", "words", "here", "中文字符", "😀", "🚀🚀", "naïve", "👍🏽", "x"])
phrases = st.lists(words, min_size=1, max_size=4).map(" ".join)
inline = st.one_of(
    phrases,
    phrases.map(lambda p: f"**{p}**"),
    phrases.map(lambda p: f"*{p}*"),
    phrases.map(lambda p: f"`{p}`"),
    st.tuples(phrases, st.integers(0, 99)).map(lambda t: f"[{t[0]}](https://example.com/{t[1]})"),
)
paragraph = st.lists(inline, min_size=1, max_size=30).map(" ".join)
code_block = st.tuples(
    st.sampled_from(["python", "js", ""]), st.lists(phrases, min_size=1, max_size=25)
).map(lambda t: f"```{t[0]}\n" + "\n".join(t[1]) + "\n```")
replies = st.lists(st.one_of(paragraph, code_block), min_size=1, max_size=8).map("\n\n".join)


@settings(max_examples=300, deadline=None)
@given(replies, st.integers(40, 300))
def test_any_mixture_splits_into_valid_messages_that_lose_nothing(
    markdown: str, limit: int
) -> None:
    chunks = render(markdown, limit)
    assert_sendable(chunks, limit)
    assert_same_as_converted(markdown, chunks)


def test_cuts_prefer_paragraphs_then_lines_then_words() -> None:
    paragraph = render("a" * 60 + "\n\n" + "b " * 40, 100)
    assert paragraph[0].text == "a" * 60 + "\n\n"
    line = render("c" * 60 + "\n" + "d " * 40, 100)
    assert line[0].text == "c" * 60 + "\n"
    words = render("e " * 80, 50)
    assert len(words) > 1 and all(chunk.text.endswith("e ") for chunk in words[:-1])
    # A boundary that would leave a message nearly empty is passed over for a later one.
    greeting = render("Hi.\n\n" + "f " * 100, 100)
    assert greeting[0].text.startswith("Hi.\n\nf f") and greeting[0].text.endswith("f ")


def test_a_cut_without_spaces_never_splits_an_emoji_sequence() -> None:
    family = "👨\u200d👩\u200d👧"  # one visible emoji, 8 UTF-16 units
    chunks = render(family * 40, 50)
    assert len(chunks) > 1
    assert all(chunk.text == family * (len(chunk.text) // len(family)) for chunk in chunks)
    assert "".join(chunk.text for chunk in chunks) == family * 40


def test_a_link_cut_in_two_keeps_its_url_on_both_sides() -> None:
    chunks = render("[" + "read the whole guide " * 6 + "](https://example.com/guide)", 40)
    assert len(chunks) > 1
    for chunk in chunks:
        links = [e for e in chunk.entities if e["type"] == "text_link"]
        assert [link["url"] for link in links] == ["https://example.com/guide"]


def test_plain_keeps_the_words_and_drops_the_formatting() -> None:
    chunk = render("**Bold** and [a link](https://example.com) 😀")[0]
    assert chunk.entities
    assert plain(chunk) == Chunk(chunk.text)


@pytest.mark.parametrize("markdown", ["", "   ", "\n\n\t \n", "```\n   \n```"])
def test_a_reply_with_nothing_visible_gives_no_messages(markdown: str) -> None:
    assert render(markdown) == []


@pytest.mark.parametrize(
    "code",
    [
        "y" * 30 + "\n" + " " * 15 + "z" * 60,  # a cut lands just before deep indentation
        "a" * 35 + " x" + " " * 10,  # padding after the last word does not fit with it
    ],
)
def test_whitespace_beside_text_is_never_left_as_a_blank_message(code: str) -> None:
    markdown = f"```\n{code}\n```"
    chunks = render(markdown, 40)
    assert len(chunks) > 1
    assert_sendable(chunks, 40)
    assert_same_as_converted(markdown, chunks)


def test_only_whitespace_too_long_to_share_a_message_is_dropped() -> None:
    markdown = "```\nfirst\n" + "\n" * 100 + "last\n```"
    chunks = render(markdown, 40)
    assert_sendable(chunks, 40)
    text, _ = converted(markdown)
    joined = "".join(chunk.text for chunk in chunks)
    assert re.sub(r"\s", "", joined) == re.sub(r"\s", "", text) == "firstlast"


def test_a_reply_the_converter_rejects_goes_out_as_plain_text(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def refuse(markdown: str, **_: Any) -> None:
        raise ValueError("unparseable")

    monkeypatch.setattr(telegramify_markdown, "convert", refuse)
    markdown = "**Still** worth reading 😀 " * 40
    with caplog.at_level(logging.DEBUG, logger="platforms.telegram.format"):
        chunks = render(markdown, 100)
    assert_sendable(chunks, 100)
    assert "".join(chunk.text for chunk in chunks) == markdown
    assert all(chunk.entities == () for chunk in chunks)
    assert "plain text" in caplog.text
    assert render(" \n\t ", 100) == []  # blank is still blank without the converter
